"""The typed federation hooks: what the engine calls on a callback, and what a callback may read of the trainer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from torch import nn

from fedhet.core.state import ClientUpdate, ServerState


@runtime_checkable
class Federation(Protocol):
    """What a callback may read of the running trainer (:class:`~fedhet.plugins.FederatedTrainer` implements it).

    Attributes:
        rounds: the rounds of the run.
        current_round: rounds completed so far.
        local_epochs: the trainer's ``local_epochs``.
        seed: the run's seed; a callback's own draws derive from it (:func:`~fedhet.core.seeding.derive_seed`).
        server_state: what the server holds and sends down; server-side callbacks edit it.
        history: every completed round's metrics.
        fitting: whether ``fit`` is running (``False`` during ``validate``/``test``).

    """

    rounds: int
    current_round: int
    local_epochs: int
    seed: int
    server_state: ServerState
    history: list[dict[str, float]]
    fitting: bool

    @property
    def datamodule(self) -> Any:
        """The federated datamodule of the run (``client_ids``, ``specs``, ``client(cid)``)."""

    @property
    def client_ids(self) -> list[str]:
        """The federation's clients, in order."""

    @property
    def is_global_zero(self) -> bool:
        """Whether this is the process that logs and writes checkpoints."""

    @property
    def run_dir(self) -> Path:
        """This run's version folder (config, checkpoints, logs, spilled states, plots)."""

    def owns(self, client_id: str) -> bool:
        """Whether this process trains and keeps the state of ``client_id``."""


class FederationHooks:
    """The engine's hooks with their types, all no-ops; a callback overrides those it needs.

    The engine passes each hook only the keyword arguments its signature names (as ``Fabric.call`` does), so an
    override may drop arguments it does not use. Order in a run: ``on_federation_start``; per round
    ``on_round_start``, per client ``on_client_fit_start`` then ``on_client_fit_end`` (see
    :mod:`fedhet.plugins.runners` for the stacked runner's order), ``on_aggregate_start``, ``on_aggregate_end``,
    ``on_evaluation_end`` (rounds that evaluate), ``on_round_end``; ``on_federation_end``.
    """

    def on_federation_start(self, trainer: Federation, module: nn.Module) -> None:
        """Called once before the first round (also after a resume)."""

    def on_round_start(self, trainer: Federation, round_idx: int, client_ids: list[str]) -> None:
        """Called when round ``round_idx`` starts, with the sampled clients."""

    def on_client_fit_start(self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module) -> None:
        """Called before a client's local training, with its state and the server payload loaded."""

    def on_client_fit_end(
        self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module, update: ClientUpdate
    ) -> None:
        """Called after a client's local training, with the upload it produced."""

    def on_aggregate_start(self, trainer: Federation, round_idx: int, updates: Sequence[ClientUpdate]) -> None:
        """Called on every process with all uploads of the round, in client order, before aggregation."""

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Called after the shared parameters were aggregated; server-side method steps go here."""

    def on_evaluation_end(self, trainer: Federation, stage: str, round_idx: int, metrics: dict[str, float]) -> None:
        """Called after every client was evaluated, with the summarised metrics."""

    def on_round_end(self, trainer: Federation, round_idx: int, metrics: dict[str, float]) -> None:
        """Called after a round's aggregation, evaluation and logging."""

    def on_federation_end(self, trainer: Federation) -> None:
        """Called once after the last round."""
