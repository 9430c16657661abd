"""Capabilities a module may declare beyond the contract, which the engine checks by type instead of probing names.

* :class:`StackableModule` — its clients can train many at once (``FederatedTrainer(stack_clients=...)``,
  :mod:`fedhet.plugins.stacked`): it gives the per-sample losses of a batch.
* :class:`PenalisedModule` — its local loss adds a penalty on the distance between its parameters and those it
  received (FedProx); the stacked path adds it for each client.
* :class:`RoundAware` — its local schedule depends on the round (FLIC's ``rep_start_round``, ``final_local_epochs``);
  its server callback tells it the round before the client trains.

The engine asks ``isinstance(module, StackableModule)`` (a ``runtime_checkable`` protocol: the members are present);
what else stacking needs of a module is checked by ``fedhet.plugins.stacked.stacking_refusal``, which names the reason
when it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class StackableModule(Protocol):
    """A module whose clients can train in stacks under ``torch.func.vmap``.

    Attributes:
        stack_client_attributes: ``None`` (its ``on_train_start``/``on_train_end``/``client_statistics`` are not run in
            stacks), or the names of the attributes its ``on_train_start`` sets per client (FedPAC's centroids), which
            the stacked path keeps per client.

    """

    stack_client_attributes: tuple[str, ...] | None

    def sample_losses(self, batch: Any) -> Tensor:
        """Per-sample training losses ``(B,)`` of a batch of ``B`` samples; their mean is ``training_step``'s loss.

        Rows of zeros (the padding of short batches) must give finite losses.
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
