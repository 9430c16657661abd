"""A ``rich`` progress display over rounds and the clients of each round."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from torch import nn

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientUpdate, Federation


def summary_table(title: str, metrics: dict[str, float]) -> Table:
    """The client-summary metrics (``*_mean``, ``*_weighted``, ``*_worst``) of a round as a rich table."""
    table = Table(title=title)
    for column in ("metric", "mean", "weighted", "worst"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    stems = sorted({key.rsplit("_", 1)[0] for key in metrics if key.endswith("_mean") and "/" in key})
    for stem in stems:
        cells = [metrics.get(f"{stem}_{kind}") for kind in ("mean", "weighted", "worst")]
        table.add_row(stem, *("" if c is None else f"{c:.4f}" for c in cells))
    return table


class RichRoundProgress(FederatedCallback):
    """Two bars, rounds and clients in the current round, plus the latest validation accuracy.

    The bars are silent on every process but rank 0 and when standard output is not a terminal (CI, log files); the
    final summary table (after ``fit``, ``validate`` or ``test``) is printed by rank 0 in every case.

    Args:
        force: show the display even when standard output is not a terminal.

    """

    def __init__(self, force: bool = False) -> None:
        self.force = force
        self._progress: Progress | None = None

    def _enabled(self, trainer: Any) -> bool:
        return trainer.is_global_zero and (self.force or sys.stdout.isatty())

    def on_federation_start(self, trainer: Federation, module: nn.Module) -> None:
        """Start the display."""
        if not self._enabled(trainer):
            return
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
        )
        self._progress.start()
        self._rounds = self._progress.add_task("rounds", total=trainer.rounds, completed=trainer.current_round, info="")
        self._clients = self._progress.add_task("clients", total=0, info="")

    def on_round_start(self, trainer: Federation, round_idx: int, client_ids: list[str]) -> None:
        """Reset the client bar for the clients of this process."""
        if self._progress is not None:
            self._progress.reset(self._clients, total=sum(trainer.owns(c) for c in client_ids), info="")

    def on_client_fit_end(
        self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module, update: ClientUpdate
    ) -> None:
        """Advance the client bar."""
        if self._progress is not None:
            self._progress.update(self._clients, advance=1, info=f"{client_id} loss {update.metrics['loss']:.3f}")

    def on_round_end(self, trainer: Federation, round_idx: int, metrics: dict[str, float]) -> None:
        """Advance the round bar and show the round's mean validation accuracy."""
        if self._progress is not None:
            acc = metrics.get("val/acc_mean")
            info = f"val/acc_mean {acc:.4f}" if acc is not None else ""
            self._progress.update(self._rounds, completed=round_idx + 1, info=info)

    def on_evaluation_end(self, trainer: Federation, stage: str, round_idx: int, metrics: dict[str, float]) -> None:
        """Outside ``fit`` (``validate``/``test``), print the results."""
        if trainer.is_global_zero and not trainer.fitting:
            Console().print(summary_table(f"{stage} after {round_idx} rounds", metrics))

    def on_federation_end(self, trainer: Federation) -> None:
        """Stop the display and print the last round's summary."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if trainer.is_global_zero and trainer.history:
            last = trainer.history[-1]
            Console().print(summary_table(f"after round {int(last['round']) + 1} of {trainer.rounds}", last))
