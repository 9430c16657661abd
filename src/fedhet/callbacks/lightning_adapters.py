"""Lightning's own callbacks at round granularity: ``ModelCheckpoint`` and ``EarlyStopping`` act on round metrics.

A federation has no epochs or validation loops of its own: a round (train the sampled clients, aggregate, evaluate)
is its unit. :func:`adapt_lightning_callbacks` swaps each ``ModelCheckpoint`` and ``EarlyStopping`` a user passes in
``callbacks`` for an adapter that reads the same settings and reports back on the same object
(``best_model_path``, ``best_k_models``, ``stopped_epoch``...), and refuses every other Lightning callback, naming it,
instead of ignoring it. Federation callbacks (:class:`~fedhet.callbacks.FederatedCallback`) pass through unchanged.
"""

from __future__ import annotations

import math
import operator
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from fedhet.callbacks.base import FederatedCallback

_WHY_NOT = {
    "LearningRateMonitor": "each client builds its optimizer from configure_optimizers() every round and the engine"
    " runs no learning-rate schedulers, so no learning rate changes over rounds (it is in the run's config)",
}


def _improves(mode: str) -> Any:
    return operator.gt if mode == "max" else operator.lt


class RoundModelCheckpoint(FederatedCallback):
    """Lightning's ``ModelCheckpoint`` over rounds: keeps the ``save_top_k`` best federation checkpoints by ``monitor``.

    Honoured settings of the wrapped callback: ``monitor`` (a round metric such as ``"val/acc_mean"``; ``None`` keeps
    the latest rounds), ``mode``, ``save_top_k`` (``-1``: all, ``0``: none), ``dirpath`` (default: the run's
    ``checkpoints/`` folder) and ``filename`` (default ``round=<r>-<monitor>=<value>``; a template is filled with
    ``round`` and the round's metrics, ``/`` in their names read as ``_``: ``"best-{round}-{val_acc_mean:.3f}"``).
    Rounds without the monitored metric (no evaluation that round) are skipped; every checkpoint is a whole
    federation checkpoint, loadable with ``ckpt_path``. The results are written back on the wrapped object:
    ``best_model_path``, ``best_model_score``, ``best_k_models``, ``last_model_path``, ``kth_best_model_path``.

    Args:
        checkpoint: the Lightning callback whose settings apply.

    """

    def __init__(self, checkpoint: ModelCheckpoint) -> None:
        self.checkpoint = checkpoint
        self.best_k_models: dict[str, float] = {}

    @property
    def state_key(self) -> str:
        """Checkpoint key of this callback's state (the wrapped callback's, so two monitors keep apart)."""
        return f"Round{self.checkpoint.state_key}"

    def _path(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> Path:
        folder = Path(self.checkpoint.dirpath) if self.checkpoint.dirpath else trainer.run.checkpoints
        monitor = self.checkpoint.monitor
        if self.checkpoint.filename:
            values = {key.replace("/", "_"): value for key, value in metrics.items()}
            stem = self.checkpoint.filename.format(**{**values, "round": round_idx})
        else:
            stem = f"round={round_idx}" + (f"-{monitor.replace('/', '_')}={metrics[monitor]:.4f}" if monitor else "")
        return folder / f"{stem}{self.checkpoint.FILE_EXTENSION}"

    def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
        """Save the round's federation if it ranks in the top ``save_top_k``; remove the checkpoint it displaces."""
        cb = self.checkpoint
        if cb.save_top_k == 0:
            return
        score = float(round_idx) if cb.monitor is None else metrics.get(cb.monitor)
        if score is None or not math.isfinite(score):
            return
        better = _improves("max" if cb.monitor is None else cb.mode)
        ranked = sorted(self.best_k_models.items(), key=lambda kv: kv[1], reverse=better is operator.gt)
        if 0 < cb.save_top_k <= len(ranked) and not better(score, ranked[-1][1]):
            return
        path = self._path(trainer, round_idx, metrics)
        trainer.save_checkpoint(path)
        self.best_k_models[str(path)] = score
        ranked = sorted(self.best_k_models.items(), key=lambda kv: kv[1], reverse=better is operator.gt)
        if cb.save_top_k > 0:
            for dropped, _ in ranked[cb.save_top_k :]:
                del self.best_k_models[dropped]
                if trainer.is_global_zero and dropped != str(path):
                    Path(dropped).unlink(missing_ok=True)
            ranked = ranked[: cb.save_top_k]
        self._report(ranked, str(path))

    def _report(self, ranked: list[tuple[str, float]], last: str) -> None:
        import torch

        cb = self.checkpoint
        cb.best_k_models = {p: torch.tensor(s) for p, s in ranked}
        cb.best_model_path, cb.best_model_score = ranked[0][0], torch.tensor(ranked[0][1])
        cb.kth_best_model_path, cb.kth_value = ranked[-1][0], torch.tensor(ranked[-1][1])
        cb.last_model_path = last

    def state_dict(self) -> dict[str, Any]:
        """The kept checkpoints and their scores (a resumed run goes on ranking them)."""
        return {"best_k_models": dict(self.best_k_models)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.best_k_models = dict(state["best_k_models"])


class RoundEarlyStopping(FederatedCallback):
    """Lightning's ``EarlyStopping`` over rounds: stops the federation when ``monitor`` stops improving.

    Honoured settings of the wrapped callback: ``monitor``, ``mode``, ``min_delta``, ``patience`` (counted in
    evaluated rounds, as Lightning counts validation checks), ``stopping_threshold``, ``divergence_threshold``,
    ``check_finite`` and ``strict`` (a missing metric is an error after an evaluated round). The run ends after the
    round that triggers it, with its checkpoint written; ``stopped_epoch`` on the wrapped object is that round and
    ``stopping_reason_message`` says why.

    Args:
        stopping: the Lightning callback whose settings apply.

    """

    def __init__(self, stopping: EarlyStopping) -> None:
        self.stopping = stopping
        self.best: float | None = None
        self.wait = 0

    @property
    def state_key(self) -> str:
        """Checkpoint key of this callback's state."""
        return f"Round{self.stopping.state_key}"

    def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
        """Compare the round's metric with the best so far; ask the trainer to stop after this round if it is time."""
        es = self.stopping
        if es.monitor not in metrics:
            evaluated = any(key.startswith(("val/", "test/")) for key in metrics)
            if es.strict and evaluated:
                raise KeyError(
                    f"EarlyStopping: monitor '{es.monitor}' is not a round metric; evaluated rounds log"
                    f" {sorted(k for k in metrics if k.endswith(('_mean', '_worst', '_weighted')))}"
                )
            return
        current = metrics[es.monitor]
        better = _improves(es.mode)
        reason = None
        if es.check_finite and not math.isfinite(current):
            reason = f"{es.monitor} = {current} is not finite"
        elif es.stopping_threshold is not None and better(current, es.stopping_threshold):
            reason = f"{es.monitor} = {current:.4f} passed the stopping threshold {es.stopping_threshold}"
        elif es.divergence_threshold is not None and better(-current, -es.divergence_threshold):
            reason = f"{es.monitor} = {current:.4f} diverged past {es.divergence_threshold}"
        elif self.best is None or better(current - abs(es.min_delta) * (1 if es.mode == "max" else -1), self.best):
            self.best, self.wait = current, 0
        else:
            self.wait += 1
            if self.wait >= es.patience:
                reason = f"{es.monitor} did not improve on {self.best:.4f} for {self.wait} evaluated rounds"
        es.wait_count = self.wait
        if reason is not None:
            trainer.should_stop = True
            es.stopped_epoch = round_idx
            es.stopping_reason_message = f"round {round_idx + 1}: {reason}; stopping the federation"
            if es.verbose and trainer.is_global_zero:
                print(es.stopping_reason_message, flush=True)

    def state_dict(self) -> dict[str, Any]:
        """The best value so far and the rounds waited since."""
        return {"best": self.best, "wait": self.wait}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.best, self.wait = state["best"], state["wait"]


def adapt_lightning_callbacks(callbacks: list[Any]) -> list[Any]:
    """The run's callbacks with Lightning's ``ModelCheckpoint`` / ``EarlyStopping`` adapted to rounds.

    Raises:
        ValueError: for any other Lightning callback (it would be silently ignored otherwise), naming it and why.

    """
    adapted: list[Any] = []
    for callback in callbacks:
        if isinstance(callback, FederatedCallback) or not isinstance(callback, Callback):
            adapted.append(callback)
        elif isinstance(callback, ModelCheckpoint):
            adapted.append(RoundModelCheckpoint(callback))
        elif isinstance(callback, EarlyStopping):
            adapted.append(RoundEarlyStopping(callback))
        else:
            name = type(callback).__name__
            why = _WHY_NOT.get(name, "the federation engine has no hook that would run it")
            raise ValueError(
                f"FederatedTrainer: field 'callbacks' holds Lightning's {name}, which a federation cannot honour:"
                f" {why}. Supported Lightning callbacks: ModelCheckpoint and EarlyStopping (at round granularity),"
                " and any fedhet.callbacks.FederatedCallback"
            )
    return adapted
