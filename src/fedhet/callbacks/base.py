"""The base of federation callbacks: a Lightning ``Callback`` that also answers the engine's round hooks."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, LightningModule


class FederatedCallback(Callback):
    """A Lightning callback with the federation hooks of :class:`~fedhet.plugins.FederatedTrainer`, all no-ops.

    Being a :class:`lightning.pytorch.Callback` lets a module return it from ``configure_callbacks()`` and still run
    under a plain ``lightning.Trainer``, which ignores the federation hooks. State that must survive a resume goes
    in ``state_dict``/``load_state_dict``.
    """

    def on_federation_start(self, trainer: Any, module: LightningModule) -> None:
        """Called once before the first round (also after a resume)."""

    def on_round_start(self, trainer: Any, round_idx: int, client_ids: list[str]) -> None:
        """Called when round ``round_idx`` starts, with the sampled clients."""

    def on_client_fit_start(self, trainer: Any, round_idx: int, client_id: str, module: LightningModule) -> None:
        """Called before a client's local training, with its state and the server payload loaded."""

    def on_client_fit_end(
        self, trainer: Any, round_idx: int, client_id: str, module: LightningModule, update: Any
    ) -> None:
        """Called after a client's local training, with the upload it produced."""

    def on_aggregate_start(self, trainer: Any, round_idx: int, updates: list[Any]) -> None:
        """Called on every process with all uploads of the round, in client order, before aggregation."""

    def on_aggregate_end(self, trainer: Any, round_idx: int, server_state: Any, updates: list[Any]) -> None:
        """Called after the shared parameters were aggregated; server-side method steps go here."""

    def on_evaluation_end(self, trainer: Any, stage: str, round_idx: int, metrics: dict[str, float]) -> None:
        """Called after every client was evaluated, with the summarised metrics."""

    def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
        """Called at the end of a round, with its metrics (before the checkpoint is written)."""

    def on_federation_end(self, trainer: Any) -> None:
        """Called once after the last round."""
