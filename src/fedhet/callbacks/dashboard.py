"""A dashboard made for federations: per-client tables, histograms, method pictures, the checkpoint as an artifact.

Every figure goes as a PNG into the run's ``plots/`` folder; when the run logs to Weights & Biases (a
``WandbLogger``), the same content goes there too. The trainer adds this callback by itself when a ``WandbLogger`` is
among its loggers; add it to ``trainer.callbacks`` for the PNGs alone.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedhet.callbacks import figures
from fedhet.callbacks.base import FederatedCallback

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def client_rows(stage: str, metrics: dict[str, float], specs: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The per-client table of one evaluation: columns and one row per evaluated client.

    Args:
        stage: ``"val"`` or ``"test"``.
        metrics: the evaluation's metrics, with the per-client keys ``<stage>/<metric>/<client>``.
        specs: the clients' descriptions (``FederatedDataModule.specs``), for sample and class counts.

    Returns:
        ``(columns, rows)``: ``client``, ``samples`` (of the evaluated split), ``classes`` (present in its training
        split), then every metric, in name order.

    """
    values: dict[str, dict[str, float]] = defaultdict(dict)
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == stage and parts[2] in specs:
            values[parts[2]][parts[1]] = value
    names = sorted({name for per_client in values.values() for name in per_client})
    rows = []
    for cid in specs:
        if cid in values:
            spec = specs[cid]
            samples = spec.num_val if stage == "val" else spec.num_test
            rows.append([cid, samples, len(spec.classes), *(values[cid].get(name) for name in names)])
    return ["client", "samples", "classes", *names], rows


class FederationDashboard(FederatedCallback):
    """Per-evaluation client tables and accuracy histograms, communication, method pictures, checkpoint artifact.

    After each evaluation: a table of the clients (client, samples, classes, every metric) and a histogram of their
    ``metric`` (W&B: ``<stage>/clients`` and ``<stage>/<metric>_histogram`` in the round's row; PNG:
    ``plots/<stage>_<metric>_clients.png``, the latest). After ``fit``: participation and bytes per round
    (``plots/communication.png``); every picture the run's callbacks offer
    (:meth:`~fedhet.callbacks.base.FederatedCallback.figures`, as ``plots/<name>.png`` and W&B ``figures/<name>``):
    FedPAC's head-mixing weights as a heat map, FLIC's global anchors with clients' training samples embedded by
    their own embeddings in 2-D, FedDaDiL's atoms in 2-D, HyFEM's matching objective per round; and, on W&B,
    ``last.ckpt`` as a ``model`` artifact. ``figures_every`` also sends the pictures to W&B every that many rounds.

    Args:
        metric: the per-client metric of the histograms.
        plots: write the PNG files (needs matplotlib, ``pip install "fedhet[plot]"``).
        figures_every: send the method pictures to W&B every this many rounds too (0: after ``fit`` only).
        log_checkpoint: upload ``last.ckpt`` to W&B as an artifact after ``fit``.

    """

    def __init__(
        self,
        metric: str = "acc",
        plots: bool = True,
        figures_every: int = 0,
        log_checkpoint: bool = True,
    ) -> None:
        self.metric = metric
        self.plots = plots
        self.figures_every = figures_every
        self.log_checkpoint = log_checkpoint
        self._last_round = 0

    # ------------------------------------------------------------------ where things go
    @staticmethod
    def _wandb(trainer: Any) -> Any | None:
        from lightning.pytorch.loggers import WandbLogger

        return next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)

    def _save(self, trainer: Any, figure: Figure, name: str) -> Path | None:
        if not (self.plots and trainer.is_global_zero):
            return None
        folder = trainer.run.plots
        folder.mkdir(parents=True, exist_ok=True)
        path: Path = folder / f"{name}.png"
        figure.savefig(path, dpi=110)
        return path

    def _send(self, trainer: Any, payload: dict[str, Any], step: int, commit: bool = True) -> None:
        """Log ``payload`` to W&B: in a row of its own at ``step``, or (``commit=False``) in the round's next row."""
        logger = self._wandb(trainer)
        if logger is not None and trainer.is_global_zero:
            if commit:
                logger.experiment.log({**payload, "trainer/global_step": step})
            else:
                logger.experiment.log(payload, commit=False)

    # ------------------------------------------------------------------ hooks
    def on_evaluation_end(self, trainer: Any, stage: str, round_idx: int, metrics: dict[str, float]) -> None:
        """The clients' table and the histogram of their ``metric``."""
        columns, rows = client_rows(stage, metrics, trainer.datamodule.specs)
        if not rows:
            return
        logger = self._wandb(trainer)
        wanted = f"{stage}/{self.metric}/"
        specs = trainer.datamodule.specs
        values = [v for k, v in metrics.items() if k.startswith(wanted) and k[len(wanted) :] in specs]
        if logger is not None and trainer.is_global_zero:  # into the row of the round's metrics, logged next
            import wandb

            payload: dict[str, Any] = {f"{stage}/clients": wandb.Table(columns=list[Any](columns), data=rows)}
            if values:
                payload[f"{stage}/{self.metric}_histogram"] = wandb.Histogram(values)
            self._send(trainer, payload, round_idx, commit=False)
        if values and self.plots and trainer.is_global_zero:
            when = "after training" if not trainer.fitting else f"round {round_idx + 1}"
            title = f"{stage} {self.metric} of {len(values)} clients, {when}"
            self._save(trainer, figures.client_histogram(values, self.metric, title), f"{stage}_{self.metric}_clients")

    def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
        """Send the callbacks' pictures every ``figures_every`` rounds."""
        self._last_round = round_idx
        if self.figures_every and (round_idx + 1) % self.figures_every == 0:
            self._send_figures(trainer, round_idx, save=False)

    def on_federation_end(self, trainer: Any) -> None:
        """Communication and method pictures as PNGs (and on W&B), and the last checkpoint as a W&B artifact."""
        if not trainer.is_global_zero or not trainer.history:
            return
        if self.plots:
            self._save(trainer, figures.communication(trainer.history), "communication")
        self._send_figures(trainer, self._last_round, save=True)
        logger = self._wandb(trainer)
        last = trainer.run.checkpoints / "last.ckpt"
        if logger is not None and self.log_checkpoint and last.is_file():
            import wandb

            artifact = wandb.Artifact(f"federation-{logger.experiment.id}", type="model")
            artifact.add_file(str(last), name="last.ckpt")
            logger.experiment.log_artifact(artifact, aliases=["latest", f"round-{trainer.current_round}"])

    # ------------------------------------------------------------------ the callbacks' pictures
    def method_figures(self, trainer: Any, round_idx: int) -> dict[str, Figure]:
        """The pictures the run's callbacks offer (:meth:`~fedhet.callbacks.base.FederatedCallback.figures`)."""
        out: dict[str, Figure] = {}
        for callback in trainer.callbacks:
            if isinstance(callback, FederatedCallback) and callback is not self:
                out.update(callback.figures(trainer, round_idx))
        return out

    def _send_figures(self, trainer: Any, round_idx: int, save: bool) -> None:
        pictures = self.method_figures(trainer, round_idx)
        logger = self._wandb(trainer)
        for name, figure in pictures.items():
            if save:
                self._save(trainer, figure, name)
            if logger is not None and trainer.is_global_zero:
                import wandb
                from PIL import Image

                buffer = io.BytesIO()
                figure.savefig(buffer, format="png", dpi=110)
                buffer.seek(0)
                self._send(trainer, {f"figures/{name}": wandb.Image(Image.open(buffer))}, round_idx)
