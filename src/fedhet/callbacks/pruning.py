"""Optuna pruning at round granularity: a federation stops after a round whose validation metric ranks it poorly.

:class:`OptunaPruning` reports the monitored round metric of every evaluated round to its Optuna trial and asks the
study's pruner whether the trial should stop; when it should, the federation ends after that round (as
``EarlyStopping`` ends it, :mod:`fedhet.callbacks.lightning_adapters`) and the run folder gets ``pruned.json``. It
reaches its trial through a shared storage (:func:`open_storage`), so a ``fedhet fit`` in another process, or on
another machine, can be pruned by the study that asked for it: the tuner (:mod:`fedhet.experiments.tuning`) passes
it on the command line (``--trainer.callbacks+=fedhet.callbacks.OptunaPruning --trainer.callbacks.storage=...``).

Tuning reads validation splits only: a monitor that names a test metric is refused. Optuna is imported when a
callback is built, not when :mod:`fedhet.callbacks` is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedhet.callbacks.base import FederatedCallback

if TYPE_CHECKING:
    import optuna

PRUNED_FILE = "pruned.json"
"""The file a pruned fit writes into its run folder: ``{"trial": n, "round": r, "monitor": ..., "value": v}``."""

PRUNED_ATTR = "fedhet_pruned_round"
"""The trial's user attribute set when its fit was pruned: the (0-based) round after which it stopped."""

PRUNER_ATTR = "fedhet_pruner"
"""The study's user attribute holding the pruner's settings (``startup_trials``, ``warmup_rounds``)."""

JOURNAL_SUFFIXES = (".log", ".jsonl")


def check_validation_metric(metric: str, owner: str, field: str) -> str:
    """``metric``, refused when it names a test metric: tuning reads validation splits only.

    Args:
        metric: a round metric name, e.g. ``"val/acc_mean"``.
        owner: who asks, for the message (e.g. ``"OptunaPruning"``).
        field: the field that holds it, for the message.

    Raises:
        ValueError: when ``metric`` starts with ``test`` (``test/...``, ``test_new/...``).

    Example:
        >>> check_validation_metric("val/acc_mean", "tuning", "metric")
        'val/acc_mean'

    """
    if metric.startswith("test"):
        raise ValueError(
            f"{owner}: field '{field}' is {metric!r}, a test metric; hyperparameters are chosen on validation splits"
            " only (a 'val/...' round metric such as 'val/acc_mean')"
        )
    return metric


def open_storage(storage: str | None) -> Any:
    """The Optuna storage a ``storage`` string names.

    Args:
        storage: ``None``: a new in-memory storage (one process); a path ending in ``.log`` or ``.jsonl``: a
            :class:`optuna.storages.JournalStorage` on that file (several processes, or machines on a shared file
            system, append to it); anything else: a database URL for :class:`optuna.storages.RDBStorage`
            (``sqlite:///tuning.db``, ``postgresql://host/db``).

    Returns:
        an ``optuna.storages.BaseStorage``.

    """
    import optuna
    from optuna.storages.journal import JournalFileBackend

    if storage is None:
        return optuna.storages.InMemoryStorage()
    if storage.endswith(JOURNAL_SUFFIXES):
        Path(storage).parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(storage))
    if "://" not in storage:
        raise ValueError(
            f"tuning: field 'storage' is {storage!r}: give a journal file ending in .log or .jsonl, or a database URL"
            " such as sqlite:///tuning.db"
        )
    return optuna.storages.RDBStorage(storage)


def median_pruner(settings: dict[str, Any] | None) -> optuna.pruners.BasePruner:
    """Optuna's median rule (Golovin et al., 2017, "Google Vizier", KDD) with the study's settings.

    A trial is pruned after a round whose monitored value is worse than the median of the other trials' values at
    that round, once ``startup_trials`` trials have finished and after ``warmup_rounds`` rounds of its own.

    Args:
        settings: ``{"startup_trials": int, "warmup_rounds": int}``; Optuna's defaults (5, 0) when ``None``.

    """
    import optuna

    settings = settings or {}
    return optuna.pruners.MedianPruner(
        n_startup_trials=int(settings.get("startup_trials", 5)), n_warmup_steps=int(settings.get("warmup_rounds", 0))
    )


def was_pruned(run_dir: str | Path) -> bool:
    """Whether the fit that wrote ``run_dir`` (a run's version folder) stopped because its trial was pruned."""
    return (Path(run_dir) / PRUNED_FILE).is_file()


def _trial_id(storage: Any, study_name: str, number: int) -> int:
    """The storage's id of trial ``number`` of ``study_name``."""
    return int(storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study_name), number))


class OptunaPruning(FederatedCallback):
    """Reports a validation round metric to an Optuna trial and stops the federation when the study prunes it.

    Every round that logs ``monitor`` (rounds that evaluate), its value is reported to the trial with the round index
    as the step; when the study's pruner then prunes the trial, the run stops after this round (its last checkpoint
    written), the trial gets the user attribute :data:`PRUNED_ATTR` and the run folder gets :data:`PRUNED_FILE`. The
    pruner is the study's median rule with the settings the tuner stored on the study (:data:`PRUNER_ATTR`). With
    several processes, the process that logs decides and the others follow it.

    Args:
        storage: the study's storage, as :func:`open_storage` reads it (a journal file or a database URL; an
            in-memory study of another process cannot be reached).
        study_name: the study's name.
        trial_number: the trial's number in the study.
        monitor: the round metric to report; a validation metric (one that starts with ``test`` is refused).

    """

    def __init__(self, storage: str, study_name: str, trial_number: int, monitor: str = "val/acc_mean") -> None:
        self.monitor = check_validation_metric(monitor, "OptunaPruning", "monitor")
        self.storage = storage
        self.study_name = study_name
        self.trial_number = trial_number
        self._connection: tuple[optuna.Study, Any, int] | None = None

    @classmethod
    def for_trial(cls, trial: optuna.Trial, monitor: str = "val/acc_mean") -> OptunaPruning:
        """A callback bound to a live trial of this process (whose study may be in memory).

        Args:
            trial: the trial to report to.
            monitor: as in the constructor.

        """
        callback = cls("", trial.study.study_name, trial.number, monitor)
        trial_id = _trial_id(trial.storage, trial.study.study_name, trial.number)
        callback._connection = (trial.study, trial.storage, trial_id)
        return callback

    def _connect(self) -> tuple[optuna.Study, Any, int]:
        """The study (with its pruner), its storage and the trial's id, opened once."""
        if self._connection is None:
            import optuna

            storage = open_storage(self.storage)
            study = optuna.load_study(study_name=self.study_name, storage=storage)
            study.pruner = median_pruner(study.user_attrs.get(PRUNER_ATTR))
            self._connection = (study, storage, _trial_id(storage, self.study_name, self.trial_number))
        return self._connection

    def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
        """Report the round's monitored value; ask the trainer to stop after this round if the trial is pruned."""
        if self.monitor not in metrics:
            return
        value = float(metrics[self.monitor])
        prune = False
        if trainer.is_global_zero:
            study, storage, trial_id = self._connect()
            if math.isfinite(value):
                storage.set_trial_intermediate_value(trial_id, round_idx, value)
            prune = bool(study.pruner.prune(study, storage.get_trial(trial_id)))
            if prune:
                storage.set_trial_user_attr(trial_id, PRUNED_ATTR, round_idx)
                record = {"trial": self.trial_number, "round": round_idx, "monitor": self.monitor, "value": value}
                (Path(trainer.run_dir) / PRUNED_FILE).write_text(json.dumps(record) + "\n")
        fabric = getattr(trainer, "fabric", None)
        if fabric is not None and fabric.world_size > 1:
            prune = bool(fabric.broadcast(prune, src=0))
        if prune:
            trainer.should_stop = True
            if trainer.is_global_zero:
                print(
                    f"round {round_idx + 1}: {self.monitor} = {value:.4f}; Optuna pruned trial {self.trial_number},"
                    " stopping the federation",
                    flush=True,
                )
