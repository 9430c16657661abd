"""The baselines personalised methods are measured against: Local, FedAvg (-FT), FedPer, FedRep, FedBABU, FedProx."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from fedhet.core import LocalPhase
from fedhet.functional.proximal import proximal_penalty
from fedhet.modules.classifier import FederatedClassifier


class LocalOnly(FederatedClassifier):
    """Each client trains its own model on its own data; nothing is shared (the "Local" baseline).

    Args:
        **kwargs: the :class:`FederatedClassifier` arguments.

    """

    shared = ()


class FedAvg(FederatedClassifier):
    """One global model averaged by sample count (McMahan et al., AISTATS 2017).

    With ``finetune_epochs > 0`` this is FedAvg-FT: before each evaluation a client fine-tunes a copy of the global
    model on its own training data for that many epochs and is evaluated with it; the copy is then dropped.

    Args:
        finetune_epochs: local fine-tuning epochs before evaluation (0: plain FedAvg).
        **kwargs: the :class:`FederatedClassifier` arguments.

    """

    shared = ("*",)

    def __init__(self, finetune_epochs: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if finetune_epochs < 0:
            raise ValueError(f"FedAvg: field 'finetune_epochs' must be >= 0, got {finetune_epochs}")
        self.finetune_epochs = finetune_epochs

    def adaptation_phases(self) -> list[LocalPhase]:
        """FedAvg-FT's fine-tuning before evaluation."""
        return [LocalPhase("finetune", epochs=self.finetune_epochs)] if self.finetune_epochs else []


class FedRep(FederatedClassifier):
    """Shared body, personal head; each round trains the head with the body frozen, then the body with the head frozen.

    Collins et al., "Exploiting Shared Representations for Personalized Federated Learning", ICML 2021. The body
    phase lasts the trainer's ``local_epochs`` (or ``local_steps``).

    Args:
        head_epochs: epochs of the head phase in each round.
        **kwargs: the :class:`FederatedClassifier` arguments.

    """

    shared = ("body.*",)

    def __init__(self, head_epochs: int = 5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if head_epochs < 1:
            raise ValueError(f"FedRep: field 'head_epochs' must be at least 1, got {head_epochs}")
        self.head_epochs = head_epochs

    def local_phases(self) -> list[LocalPhase]:
        """Head epochs, then body epochs."""
        return [LocalPhase("head", trainable=("head.*",), epochs=self.head_epochs), LocalPhase("body", ("body.*",))]


class FedPer(FederatedClassifier):
    """Shared body, personal head, both trained together in every local epoch.

    Arivazhagan et al., "Federated Learning with Personalization Layers", arXiv:1912.00818, 2019: the base layers are
    averaged by the server, the personalisation layers (here the linear head) never leave the client.

    Args:
        **kwargs: the :class:`FederatedClassifier` arguments.

    """

    shared = ("body.*",)


class FedBABU(FedAvg):
    """Only the body learns during federation; the head keeps the shared random initialisation until fine-tuning.

    Oh, Kim & Yun, "FedBABU: Toward Enhanced Representation for Federated Image Classification", ICLR 2022. Every
    client holds the same head (the server's initial one; it is never trained, so averaging leaves it unchanged) and
    trains only the body in its local epochs; before each evaluation a client fine-tunes a copy of the whole model on
    its own training data for ``finetune_epochs`` epochs (as FedAvg-FT does) and is evaluated with it. The default
    budget is the paper's: personalised accuracy after 5 fine-tuning epochs (tau_f) of the whole model (the
    authors' code's default ``--ft_ep 5``), with the training learning rate.

    Args:
        finetune_epochs: local fine-tuning epochs before evaluation (5 as the paper).
        **kwargs: the :class:`FederatedClassifier` arguments.

    """

    def __init__(self, finetune_epochs: int = 5, **kwargs: Any) -> None:
        super().__init__(finetune_epochs=finetune_epochs, **kwargs)

    def local_phases(self) -> list[LocalPhase]:
        """The body alone; the head stays frozen."""
        return [LocalPhase("body", trainable=("body.*",))]


class FedProx(FederatedClassifier):
    r"""One global model; each client adds :math:`\frac{\mu}{2}\|\theta - \theta^t\|^2` to its local loss.

    Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020. :math:`\theta^t` is the model the
    client received at the start of the round (under a plain Trainer: the model at the start of ``fit``). With
    ``mu = 0`` this is FedAvg.

    Args:
        mu: weight of the proximal term.
        **kwargs: the :class:`FederatedClassifier` arguments.

    """

    shared = ("*",)

    def __init__(self, mu: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if mu < 0:
            raise ValueError(f"FedProx: field 'mu' must be >= 0, got {mu}")
        self.mu = mu

    def local_penalty(self, params: Mapping[str, Tensor], received: Mapping[str, Tensor]) -> Tensor:
        r""":math:`\mu \cdot \frac12 \|\theta - \theta^t\|^2` over every parameter (also under ``stack_clients``)."""
        return self.mu * proximal_penalty(params.values(), [received[name] for name in params])
