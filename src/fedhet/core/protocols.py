"""The contract between the federation engine and a method's LightningModule."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from fedhet.core.spec import ClientSpec
from fedhet.core.uploads import UploadDeclaration


@dataclass(frozen=True)
class LocalPhase:
    """One stage of a client's local schedule, e.g. FedRep's head epochs then body epochs.

    Args:
        name: a label for logs and for the module's own ``training_step``.
        trainable: ``fnmatch`` patterns of the parameter names trained in this phase; the others are frozen.
        epochs: epochs of local data in this phase; ``None`` takes the trainer's ``local_epochs``.
        steps: optimizer steps in this phase instead of epochs; ``None`` takes the trainer's ``local_steps``.
        optimizer: which optimizer of the module's ``configure_optimizers()`` steps in this phase (an index into the
            list it returns; ``0`` when it returns one), or a tuple of indices that all step after each backward pass
            (e.g. FLIC's model and its local copy of the anchors). A phase with an optimizer of its own runs through
            the engine like any other (Fabric precision, step counts, seeds), e.g. a pre-training phase that trains an
            embedding with its own Adam before the round's main phase (FLIC's pre-training).
        batch_size: if set, the phase draws shuffled batches of this size from the client's training set instead of
            the client's own batches (e.g. FLIC's ``pretrain_batch_size``).
        loss_key: where the phase's mean loss goes in the client's training metrics: ``"loss"`` (the round's
            ``train/loss_*``), or a name of its own for a phase with another objective (FLIC's pre-training reports
            ``"train/pretrain_loss"``, logged per round as ``train/pretrain_loss_mean``). Its steps count either way.

    """

    name: str = "local"
    trainable: tuple[str, ...] = ("*",)
    epochs: int | None = None
    steps: int | None = None
    optimizer: int | tuple[int, ...] = 0
    batch_size: int | None = None
    loss_key: str = "loss"

    @property
    def optimizers(self) -> tuple[int, ...]:
        """The indices of the optimizers this phase steps."""
        return (self.optimizer,) if isinstance(self.optimizer, int) else tuple(self.optimizer)


@dataclass
class LocalTraining:
    """What the engine hands a module for one client's local training (``set_local_training``).

    Args:
        batches: the client's training batches, the ones the phases iterate; a method's statistics passes over its
            local data read them (``FederatedModule.train_batches()``).
        phases: the phases the engine runs, in order (empty when the caller runs none itself): a module whose
            preparation work (e.g. FLIC's pre-training) is among them leaves it to the engine.
        logs: where the module's ``self.log`` keeps its values; the engine averages each name over the client's steps.

    """

    batches: Iterable[Any]
    phases: Sequence[LocalPhase] = ()
    logs: dict[str, list[Tensor]] = field(default_factory=dict)

    def runs(self, phase_name: str) -> bool:
        """Whether the engine runs a phase named ``phase_name`` in this local training."""
        return any(phase.name == phase_name for phase in self.phases)


@runtime_checkable
class FederatedModuleProtocol(Protocol):
    """What the engine needs from a module besides the LightningModule hooks.

    :class:`fedhet.modules.FederatedModule` implements it; a user's own LightningModule can too.
    """

    keep_optimizer_state: bool
    """Keep each client's optimizer state between its rounds."""
    reuse_optimizers: bool
    """``configure_optimizers()`` depends on hyperparameters and parameters only, so the engine may build the
    optimizers once per module and reset them for each client."""

    def setup_client(self, spec: ClientSpec) -> None:
        """Remember the client's description; ``configure_model`` then builds its layers."""

    def client_signature(self, spec: ClientSpec) -> Hashable:
        """Clients with equal signatures get identically shaped modules (one instance serves them all)."""

    def shared_state_dict(self) -> dict[str, Tensor]:
        """The parameters and buffers that leave the client, by name."""

    def client_statistics(self) -> dict[str, Tensor]:
        """The statistics the method uploads besides shared parameters (may be empty)."""

    def receive_statistics(self, statistics: Mapping[str, Tensor]) -> None:
        """Take the server's broadcast statistics before local training or evaluation."""

    def upload_declaration(self, spec: ClientSpec) -> UploadDeclaration:
        """What a client described by ``spec`` uploads besides its shared parameters.

        Called on a module built for ``spec``'s architecture; the engine admits no upload that differs from it.
        """

    def local_phases(self) -> list[LocalPhase]:
        """The local schedule of one round."""

    def preparation_phases(self) -> list[LocalPhase]:
        """Phases run before :meth:`local_phases` at this participation (e.g. FLIC's pre-training); empty for none."""

    def set_local_training(self, training: LocalTraining | None) -> None:
        """Take what the engine hands over for a client's local training (``None`` when it ends)."""

    def adaptation_phases(self) -> list[LocalPhase]:
        """Local training run on a throw-away copy before evaluation (e.g. FedAvg-FT); empty for none."""

    def set_local_phase(self, phase: LocalPhase | None) -> None:
        """Freeze every parameter that ``phase`` does not train (``None``: unfreeze all)."""

    def configure_aggregator(self) -> Any:
        """How the server folds the shared parameters: an :class:`~fedhet.plugins.Aggregator`."""

    def evaluation_metrics(self, stage: str) -> Any:
        """A ``torchmetrics.MetricCollection`` that ``validation_step``/``test_step`` update for ``stage``."""


class EngineModule(FederatedModuleProtocol, Protocol):
    """A LightningModule that implements :class:`FederatedModuleProtocol`: the type the engine drives.

    The members below are the LightningModule (and ``nn.Module``) ones the engine calls; the trainer checks a module
    against ``LightningModule`` and :class:`FederatedModuleProtocol` before any client runs.
    """

    training: bool

    def configure_model(self) -> None:
        """Create the layers (after :meth:`setup_client`)."""

    def configure_optimizers(self) -> Any:
        """The client's optimizers: one, or a list that phases pick from (:attr:`LocalPhase.optimizer`)."""

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """One local step's loss (a tensor, or a dict holding it under ``"loss"``)."""

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Update the ``"val"`` evaluation metrics with one batch."""

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Update the ``"test"`` evaluation metrics with one batch."""

    def on_train_start(self) -> None:
        """Called before a client's local training."""

    def on_train_end(self) -> None:
        """Called after a client's local training."""

    def state_dict(self, *, keep_vars: bool = False) -> dict[str, Tensor]:
        """Every parameter and buffer, by name (``keep_vars``: the module's own tensors, else detached views)."""

    def get_submodule(self, target: str) -> nn.Module:
        """The layer at the dotted path ``target`` (``""``: the module itself)."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Load parameters and buffers by name."""

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """The parameters, by name."""

    def named_modules(self) -> Iterator[tuple[str, nn.Module]]:
        """The layers, by name."""

    def train(self, mode: bool = True) -> Any:
        """Switch to training mode."""

    def eval(self) -> Any:
        """Switch to evaluation mode."""

    def to(self, device: torch.device) -> Any:
        """Move the parameters and buffers to ``device`` (in place)."""
