r"""HyFEM: hybrid federated learning over clients that hold different feature blocks of different samples.

X. Zhang, W. Yin, T. Chen, M. Hong, "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and
Implementation", TMLR 2024. A client model is one feature extractor per feature block the client holds, their
outputs concatenated into a one-hidden-layer classifier. The server keeps the full model (an extractor for every
block, a classifier over all of them). Each round a client starts from its view of the server model (the extractors
of its blocks, :math:`P_m\Theta_0`, and the matched slice of the server classifier, :math:`\Pi_m w_0`), takes local SGD
steps on cross-entropy plus two proximal terms towards that view, and uploads its extractors and classifier; the
server averages each block's extractor over its holders, matches client hidden neurons to server neurons and averages
the matched weights (:class:`~fedhet.callbacks.ModelMatching`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback
from torch import Tensor, nn

from fedhet.callbacks.hyfem import EXTRACTORS, STAT_PREFIX, ModelMatching, anchor_key, hyfem_upload
from fedhet.core import ClientSpec, Stacking, TensorSpec, UploadDeclaration
from fedhet.functional.matching import CostMode
from fedhet.functional.proximal import proximal_penalty
from fedhet.modules.classifier import FederatedClassifier
from fedhet.modules.hyfem_nets import HybridBody


class HyFEM(FederatedClassifier):
    r"""HyFEM's client: per-block extractors :math:`\Theta_m` and a one-hidden-layer classifier :math:`w_m`.

    Local loss (HyFEM eq. 8), with the anchors :math:`P_m\Theta_0` and :math:`\Pi_m w_0` received from the server:

    .. math::
        \mathrm{CE} + \frac{\mu_1}{2}\|\Theta_m - P_m\Theta_0\|^2 + \frac{\mu_2}{2}\|w_m - \Pi_m w_0\|^2

    With ``client_init="server"`` (algorithm 2) every round starts from the anchors; with ``"continue"`` (the
    convergence analysis) from the client's last iterate. Nothing is shared by name (a client's classifier has its own
    shape); the upload is the declared statistics ``hyfem/<name>`` (every parameter), and the server sends each client
    its anchors into the ``anchors.*`` buffers. Evaluation uses the client's own model after its last local step.
    Clients whose :class:`~fedhet.datamodules.ClientSpec` names no feature blocks hold one block, ``"input"``.

    Args:
        extractor_dims: hidden widths of each block's MLP extractor (the last is the feature width :math:`e`).
        hidden_dim: the client classifier's hidden width :math:`H_m`.
        server_hidden_dim: the server classifier's hidden width :math:`H_0 \ge H_m`; ``hidden_dim`` when ``None``.
        mu1: :math:`\mu_1`, weight of the extractor proximal term.
        mu2: :math:`\mu_2`, weight of the classifier proximal term.
        client_init: ``"server"`` or ``"continue"``.
        matching: match hidden neurons (``False`` keeps the identity matching: plain coordinate averaging).
        matching_passes: matching passes per round; twice the number of clients when ``None``.
        matching_cost: ``"exact"``, ``"incoming"`` or ``"descent"``, see :func:`~fedhet.functional.matching_cost`.
        optimizer: ``"sgd"`` or ``"adam"``.
        lr: learning rate.
        momentum: SGD momentum.
        weight_decay: L2 penalty.

    """

    shared = ()

    rounds_trained: Tensor  # a buffer: the rounds this client has trained

    def __init__(
        self,
        extractor_dims: Sequence[int] = (32,),
        hidden_dim: int = 64,
        server_hidden_dim: int | None = None,
        mu1: float = 0.1,
        mu2: float = 0.5,
        client_init: Literal["server", "continue"] = "server",
        matching: bool = True,
        matching_passes: int | None = None,
        matching_cost: CostMode = "exact",
        optimizer: Literal["sgd", "adam"] = "sgd",
        lr: float = 0.05,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            hidden_dims=extractor_dims, optimizer=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay
        )
        name = type(self).__name__
        if hidden_dim < 1 or (server_hidden_dim is not None and server_hidden_dim < hidden_dim):
            raise ValueError(
                f"{name}: fields 'hidden_dim' ({hidden_dim}) and 'server_hidden_dim' ({server_hidden_dim}) must satisfy"
                " 1 <= hidden_dim <= server_hidden_dim"
            )
        if mu1 < 0 or mu2 < 0:
            raise ValueError(f"{name}: fields 'mu1' and 'mu2' must be >= 0, got {mu1} and {mu2}")
        if client_init not in ("server", "continue"):
            raise ValueError(f"{name}: field 'client_init' must be 'server' or 'continue', got {client_init!r}")
        if matching_passes is not None and matching_passes < 0:
            raise ValueError(f"{name}: field 'matching_passes' must be >= 0, got {matching_passes}")
        if matching_cost not in ("exact", "incoming", "descent"):
            raise ValueError(f"{name}: field 'matching_cost' must be 'exact', 'incoming' or 'descent'")
        self.hidden_dim = hidden_dim
        self.server_hidden_dim = server_hidden_dim or hidden_dim
        self.mu1 = mu1
        self.mu2 = mu2
        self.client_init = client_init
        self.matching = matching
        self.matching_passes = matching_passes
        self.matching_cost = matching_cost

    # ---------------------------------------------------------------- layers
    def build_body(self, spec: ClientSpec) -> tuple[nn.Module, int]:
        """Extractors for the client's blocks and the classifier's hidden layer; the base adds the output layer."""
        return HybridBody(spec.block_widths, self.hidden_dims, self.hidden_dim), self.hidden_dim

    def configure_model(self) -> None:
        """Build the client model (once), with anchor buffers equal to its initial parameters."""
        if hasattr(self, "anchors"):
            return
        super().configure_model()
        self.anchors = nn.Module()
        for name, param in self.named_parameters():
            self.anchors.register_buffer(anchor_key(name).removeprefix("anchors."), param.detach().clone())
        self.register_buffer("rounds_trained", torch.zeros((), dtype=torch.long))

    def anchor(self, name: str) -> Tensor:
        """The anchor of parameter ``name``."""
        return self.get_buffer(anchor_key(name))

    def configure_callbacks(self) -> list[Callback]:
        """:class:`~fedhet.callbacks.ModelMatching` with this module's architecture and matching settings."""
        return [
            ModelMatching(
                body=HybridBody,
                extractor_dims=self.hidden_dims,
                hidden_dim=self.hidden_dim,
                server_hidden_dim=self.server_hidden_dim,
                matching=self.matching,
                passes=self.matching_passes,
                cost=self.matching_cost,
            )
        ]

    # ---------------------------------------------------------------- local training
    def on_train_start(self) -> None:
        """Start from the anchors (every round with ``client_init="server"``, else the first round only)."""
        if self.client_init == "server" or int(self.rounds_trained) == 0:
            with torch.no_grad():
                for name, param in self.named_parameters():
                    param.copy_(self.anchor(name))

    def on_train_end(self) -> None:
        """Count the round and unfreeze everything."""
        super().on_train_end()
        self.rounds_trained += 1

    def proximal_terms(self) -> tuple[Tensor, Tensor]:
        r""":math:`r_{m,1} = \frac12\|\Theta_m - P_m\Theta_0\|^2` and :math:`r_{m,2} = \frac12\|w_m - \Pi_m w_0\|^2`."""
        named = list(self.named_parameters())
        extractors = [(p, self.anchor(n)) for n, p in named if n.startswith(EXTRACTORS)]
        classifier = [(p, self.anchor(n)) for n, p in named if not n.startswith(EXTRACTORS)]
        r1 = proximal_penalty([p for p, _ in extractors], [a for _, a in extractors]).to(self.device)
        r2 = proximal_penalty([p for p, _ in classifier], [a for _, a in classifier]).to(self.device)
        return r1, r2

    def stacking(self) -> Stacking | None:
        """Its hooks run per client in stacks (restart from the anchors, round count); they set no attribute."""
        return Stacking(client_attributes=())

    def sample_losses(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Each sample's cross-entropy plus the two proximal terms (skipped at zero weight), shape ``(B,)``.

        Their mean is the step's loss (:meth:`training_step`). The proximal terms are the same for every sample of the
        client, so the mean over the batch (or over its real rows in a padded stack) adds them once: HyFEM trains in
        stacks (``StackedRunner``), each client's anchors being its own buffers under ``torch.func.vmap``.
        """
        x, y = batch
        losses = F.cross_entropy(self(x), y, reduction="none")
        if self.mu1 > 0 or self.mu2 > 0:
            r1, r2 = self.proximal_terms()
            losses = losses + (self.mu1 * r1 + self.mu2 * r2)
        return losses

    # ---------------------------------------------------------------- upload
    def client_statistics(self) -> dict[str, Tensor]:
        """Every parameter of the trained client model, as ``hyfem/<name>``: its extractors and its classifier."""
        return {STAT_PREFIX + name: param.detach() for name, param in self.named_parameters()}

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """Every parameter of the client's model as ``hyfem/<name>`` (:func:`~fedhet.callbacks.hyfem.hyfem_upload`)."""
        return hyfem_upload({name: TensorSpec.of(param) for name, param in self.named_parameters()})


class HybridLocal(HyFEM):
    """HyFEM's client architecture trained on the client's own data only (the paper's stand-alone baseline).

    Nothing is uploaded and no callback runs. Given one client that holds every block and every class, this is the
    paper's centralised baseline (the server architecture trained on all the data).

    Args:
        extractor_dims: hidden widths of each block's MLP extractor.
        hidden_dim: the classifier's hidden width.
        optimizer: ``"sgd"`` or ``"adam"``.
        lr: learning rate.
        momentum: SGD momentum.
        weight_decay: L2 penalty.

    """

    def __init__(
        self,
        extractor_dims: Sequence[int] = (32,),
        hidden_dim: int = 64,
        optimizer: Literal["sgd", "adam"] = "sgd",
        lr: float = 0.05,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            extractor_dims=extractor_dims,
            hidden_dim=hidden_dim,
            mu1=0.0,
            mu2=0.0,
            client_init="continue",
            optimizer=optimizer,
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
        )

    def configure_callbacks(self) -> list[Callback]:
        """No server step."""
        return []

    def client_statistics(self) -> dict[str, Tensor]:
        """Nothing leaves the client."""
        return {}

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """No statistic."""
        return UploadDeclaration()
