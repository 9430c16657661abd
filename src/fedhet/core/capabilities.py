"""Capabilities a module may declare beyond the contract, which the engine checks by type instead of probing names.

* :class:`Stacking` — what a module declares (``stacking()``) for its clients to train many at once
  (``FederatedTrainer(runner=StackedRunner(N))``, :mod:`fedhet.plugins.clients.stacked`): the per-client attributes its
  hooks set, whether its loss is a masked batch loss with random draws of its own (FLIC), and a reason to refuse.
* :class:`StackableModule` — a module with that hook; it gives the per-sample losses of a batch.
* :class:`BatchLossModule` — a stackable module whose loss on a batch is not a mean of per-sample losses (FLIC: the
  moments of the batch's classes, random anchor samples): it gives the loss of a zero-padded batch.
* :class:`PenalisedModule` — its local loss adds a penalty on the distance between its parameters and those it
  received (FedProx); the stacked path adds it for each client.
* :class:`RoundAware` — its local schedule depends on the round (FLIC's ``rep_start_round``, ``final_local_epochs``);
  its server callback tells it the round before the client trains.

The engine reads a module's :class:`Stacking` (``None``: its clients do not train in stacks); what else stacking
needs of a module is checked by ``fedhet.plugins.clients.stacked.stacking_refusal``, which names the reason when it
refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from torch import Tensor


@dataclass(frozen=True)
class Stacking:
    """How a module's clients train in stacks under ``torch.func.vmap`` (what its ``stacking()`` declares).

    The loss of a stacked client is the masked mean of the module's ``sample_losses`` (``(B,)`` per-sample losses,
    finite on the zero rows that pad short batches), or, with :attr:`draws`, its ``masked_loss(batch, mask)``.
    """

    client_attributes: tuple[str, ...] | None = None
    """``None``: the module's ``on_train_start`` / ``on_train_end`` / ``client_statistics`` are not run in stacks;
    else the names of the attributes its ``on_train_start`` sets per client (FedPAC's centroids; possibly none,
    HyFEM), which the stacked path keeps per client (tensors among them replace the module's for that client under
    ``vmap``), running the hooks (and ``preparation_phases()``, one client at a time) for each client."""
    draws: Callable[[Any, str | None], Any] | None = None
    """For a :class:`BatchLossModule` (its loss is ``masked_loss``): ``draws(batch, phase_name)`` gives the batch with
    the random numbers its ``training_step`` draws in that phase (global generators, the batch's device; tensors with
    the batch's rows first, or of one length for every batch), called as each batch is drawn; ``None``: the loss is
    the masked mean of ``sample_losses``."""
    refusal: str | None = None
    """Why the module's configuration cannot train in stacks (an option whose maths a stack cannot match)."""


@runtime_checkable
class StackableModule(Protocol):
    """A module whose clients can train in stacks under ``torch.func.vmap``: its :meth:`stacking` is not ``None``."""

    def stacking(self) -> Stacking | None:
        """How its clients train in stacks, or ``None`` when they cannot."""

    def sample_losses(self, batch: Any) -> Tensor:
        """Per-sample training losses ``(B,)`` of a batch of ``B`` samples; their mean is ``training_step``'s loss.

        Rows of zeros (the padding of short batches) must give finite losses.
        """


@runtime_checkable
class BatchLossModule(Protocol):
    """A stackable module whose loss on a batch is a function of the whole batch, with random draws of its own.

    The stacked path then calls :meth:`masked_loss` for each client under ``torch.func.vmap`` instead of taking the
    masked mean of ``sample_losses``, and completes each batch with its :attr:`Stacking.draws` as it draws the batch:
    the numbers the module's ``training_step`` draws on the sequential path (a stack holds no layer that draws random
    numbers, so where in the step they are drawn does not matter), the same numbers from the same random stream.
    """

    def masked_loss(self, batch: Any, mask: Tensor) -> Tensor:
        """The training loss (a scalar) of a batch completed by :attr:`Stacking.draws`, over the rows where ``mask``.

        ``mask``: boolean, ``(B,)`` (the real rows of a zero-padded batch); ``training_step`` counts every row.
        """


@runtime_checkable
class PenalisedModule(Protocol):
    """A module whose local loss adds a penalty on its distance to the parameters received for the round (FedProx).

    Attributes:
        has_local_penalty: whether the module's class defines the penalty (a base class may offer the hook unused).

    """

    has_local_penalty: bool

    def local_penalty(self, params: Mapping[str, Tensor], received: Mapping[str, Tensor]) -> Tensor:
        """The penalty for parameters ``params`` (by name) against those received at the round's start."""


@runtime_checkable
class RoundAware(Protocol):
    """A module whose local schedule depends on the federation round it trains (e.g. FLIC)."""

    def set_round(self, round_idx: int, rounds: int) -> None:
        """Take the round about to be trained (``round_idx`` of ``rounds``), before the client's local phases."""
