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

import torch
from torch import Tensor

from fedhet.callbacks import figures
from fedhet.callbacks.base import FederatedCallback
from fedhet.callbacks.feddadil import ATOM_NAMES, DictionaryAveraging
from fedhet.callbacks.fedpac import HeadMixing
from fedhet.callbacks.flic import AnchorUpdate
from fedhet.callbacks.hyfem import ModelMatching

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
    (``plots/communication.png``); each method's picture (``plots/<name>.png`` and W&B ``figures/<name>``): FedPAC's
    head-mixing weights as a heat map, FLIC's global anchors with clients' training samples embedded by their own
    embeddings in 2-D, FedDaDiL's atoms in 2-D, HyFEM's matching objective per round; and, on W&B, ``last.ckpt`` as a
    ``model`` artifact. ``figures_every`` also sends the method pictures to W&B every that many rounds.

    Args:
        metric: the per-client metric of the histograms.
        plots: write the PNG files (needs matplotlib, ``pip install "fedhet[plot]"``).
        figures_every: send the method pictures to W&B every this many rounds too (0: after ``fit`` only).
        log_checkpoint: upload ``last.ckpt`` to W&B as an artifact after ``fit``.
        max_clients: the FLIC picture embeds the training samples of at most this many clients...
        samples_per_client: ...and at most this many samples of each.

    """

    def __init__(
        self,
        metric: str = "acc",
        plots: bool = True,
        figures_every: int = 0,
        log_checkpoint: bool = True,
        max_clients: int = 10,
        samples_per_client: int = 100,
    ) -> None:
        self.max_clients = max_clients
        self.samples_per_client = samples_per_client
        self.metric = metric
        self.plots = plots
        self.figures_every = figures_every
        self.log_checkpoint = log_checkpoint
        self.objective_history: list[tuple[int, float]] = []
        """``(round, value)`` of the server's matching objective in this ``fit`` (HyFEM)."""
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
        """Record the round's server objective (HyFEM); send the method pictures every ``figures_every`` rounds."""
        self._last_round = round_idx
        for callback in trainer.callbacks:
            if isinstance(callback, ModelMatching) and callback.objective is not None:
                self.objective_history.append((round_idx, callback.objective))
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

    # ------------------------------------------------------------------ method pictures
    def method_figures(self, trainer: Any, round_idx: int) -> dict[str, Figure]:
        """Each method's picture from the run's server-side callbacks (none for methods without one)."""
        out: dict[str, Figure] = {}
        for callback in trainer.callbacks:
            if isinstance(callback, HeadMixing) and callback.weights is not None:
                out["fedpac_head_mixing"] = figures.head_mixing(callback.weights, callback.client_ids, round_idx)
            elif isinstance(callback, AnchorUpdate) and callback.means is not None:
                points, labels = self._embedded_samples(trainer)
                out["flic_anchors"] = figures.anchors(callback.means, points, labels, round_idx)
            elif isinstance(callback, DictionaryAveraging) and callback.dictionary:
                features, labels = (callback.dictionary[name] for name in ATOM_NAMES)
                out["feddadil_atoms"] = figures.atoms(features, labels, round_idx)
            elif isinstance(callback, ModelMatching) and self.objective_history:
                rounds, values = zip(*self.objective_history, strict=True)
                out["hyfem_matching_objective"] = figures.objective(
                    rounds, values, "matching objective", "HyFEM model-matching objective"
                )
        return out

    def _embedded_samples(self, trainer: Any) -> tuple[Tensor, Tensor]:
        """Training samples of up to ``max_clients`` of this process's clients, embedded by their own module."""
        points, labels = [torch.zeros(0, 0)], [torch.zeros(0, dtype=torch.long)]
        owned = [cid for cid in trainer.client_ids if trainer.owns(cid)][: self.max_clients]
        for cid in owned:
            module = trainer.client_module(cid)
            if not hasattr(module, "embed_all"):
                break
            z, y = module.embed_all(trainer.datamodule.client(cid).train_dataloader())
            keep = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))[: self.samples_per_client]
            points.append(z[keep].cpu())
            labels.append(y[keep].cpu())
        width = max(p.shape[1] for p in points)
        return torch.cat([p.reshape(-1, width) for p in points]), torch.cat(labels)

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

    def on_federation_start(self, trainer: Any, module: torch.nn.Module) -> None:
        """Forget the pictures' inputs of an earlier ``fit``."""
        self.objective_history = []
