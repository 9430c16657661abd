"""A ``rich`` progress display over rounds and the clients of each round; plain lines when output is redirected."""

from __future__ import annotations

import sys
import time
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


def round_line(round_idx: int, rounds: int, metrics: dict[str, float]) -> str:
    """One plain line for a finished round: its validation accuracy and training loss, participants and wall time."""
    parts = [f"round {round_idx + 1}/{rounds}"]
    for key in ("val/acc_mean", "val/acc_worst", "train/loss_mean"):
        if key in metrics:
            parts.append(f"{key} {metrics[key]:.4f}")
    parts.append(f"clients {int(metrics.get('clients/participants', 0))}")
    if metrics.get("clients/failed"):
        parts.append(f"failed {int(metrics['clients/failed'])}")
    if "time/round_s" in metrics:
        parts.append(f"{metrics['time/round_s']:.1f} s")
    return "  ".join(parts)


class RichRoundProgress(FederatedCallback):
    """Two bars, rounds and clients in the current round, plus the latest validation accuracy.

    The bars show on rank 0 when standard output is a terminal. When it is not (CI, log files, ``nohup``), rank 0
    prints plain lines instead: where the run writes, a line before the first round (whose clients' first
    participation may hold long phases, such as FLIC's pre-training), a line every ``heartbeat_s`` seconds while a
    round's clients train (how many are done), and one line per round (:func:`round_line`). The final summary table
    (after ``fit``, ``validate`` or ``test``) is printed by rank 0 in every case.

    Args:
        force: show the bars even when standard output is not a terminal.
        heartbeat_s: in plain mode, seconds between the lines that report a long round's progress.

    """

    def __init__(self, force: bool = False, heartbeat_s: float = 10.0) -> None:
        self.force = force
        self.heartbeat_s = heartbeat_s
        self._progress: Progress | None = None
        self._plain = False

    def _enabled(self, trainer: Any) -> bool:
        return trainer.is_global_zero and (self.force or sys.stdout.isatty())

    @staticmethod
    def _say(line: str) -> None:
        print(line, flush=True)

    def on_federation_start(self, trainer: Federation, module: nn.Module) -> None:
        """Start the display (or, when output is not a terminal, say where the run writes)."""
        self._plain = trainer.is_global_zero and not self._enabled(trainer)
        self._first_round = trainer.current_round
        if self._plain:
            self._say(
                f"fedhet: fitting {type(module).__name__} on {len(trainer.client_ids)} clients, rounds"
                f" {trainer.current_round + 1}-{trainer.rounds}, run folder {trainer.run_dir}"
            )
            return
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
        """Reset the client bar for the clients of this process (plain mode: announce the first round)."""
        self._round_started = self._last_line = time.monotonic()
        self._round_clients, self._clients_done = sum(trainer.owns(c) for c in client_ids), 0
        if self._plain and round_idx == self._first_round:
            self._say(
                f"round {round_idx + 1}/{trainer.rounds}: training {len(client_ids)} clients (a client's first round"
                " may include long set-up phases such as pre-training)"
            )
        if self._progress is not None:
            self._progress.reset(self._clients, total=sum(trainer.owns(c) for c in client_ids), info="")

    def on_client_fit_end(
        self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module, update: ClientUpdate
    ) -> None:
        """Advance the client bar (plain mode: a line when ``heartbeat_s`` passed since the last one)."""
        self._clients_done += 1
        now = time.monotonic()
        if self._plain and now - self._last_line >= self.heartbeat_s:
            self._last_line = now
            self._say(
                f"round {round_idx + 1}/{trainer.rounds}: {self._clients_done}/{self._round_clients} clients trained"
                f" in {now - self._round_started:.0f} s"
            )
        if self._progress is not None:
            self._progress.update(self._clients, advance=1, info=f"{client_id} loss {update.metrics['loss']:.3f}")

    def on_round_end(self, trainer: Federation, round_idx: int, metrics: dict[str, float]) -> None:
        """Advance the round bar and show the round's mean validation accuracy (plain mode: one line)."""
        if self._plain:
            self._say(round_line(round_idx, trainer.rounds, metrics))
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
