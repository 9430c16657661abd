"""Optuna pruning at round granularity: a federation stops after a round whose validation metric ranks it poorly.

:class:`OptunaPruning` reports the monitored round metric of every evaluated round to its Optuna trial and asks the
study's pruner whether the trial should stop; when it should, the federation ends after that round (as
``EarlyStopping`` ends it, :mod:`fedhet.callbacks.lightning_adapters`) and the run folder gets ``pruned.json``. It
reaches its trial through a shared storage (:func:`~fedhet.experiments.trials.open_storage`), so a ``fedhet fit`` in
another process, or on another machine, can be pruned by the study that asked for it: the tuner
(:mod:`fedhet.experiments.tuning`) passes it on the command line
(``--trainer.callbacks+=fedhet.experiments.pruning.OptunaPruning --trainer.callbacks.storage=...``).

Tuning reads validation splits only: a monitor that names a test metric is refused, and so is one that the module
computes from a domain adaptation target's labels (its ``target_label_metrics``), when the federation starts. Optuna
is imported when a callback connects to its study, not when this module is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedhet.callbacks.base import FederatedCallback
from fedhet.experiments import trials

if TYPE_CHECKING:
    import optuna


def was_pruned(run_dir: str | Path) -> bool:
    """Whether the fit that wrote ``run_dir`` (a run's version folder) stopped because its trial was pruned."""
    return (Path(run_dir) / trials.PRUNED_FILE).is_file()


class OptunaPruning(FederatedCallback):
    """Reports a validation round metric to an Optuna trial and stops the federation when the study prunes it.

    Every round that logs ``monitor`` (rounds that evaluate), its value is reported to the trial with the round index
    as the step; when the study's pruner then prunes the trial, the run stops after this round (its last checkpoint
    written), the trial gets the user attribute :data:`~fedhet.experiments.trials.PRUNED_ATTR` and the run folder
    gets :data:`~fedhet.experiments.trials.PRUNED_FILE`. The pruner of a study opened from its storage is the median
    rule with the settings the tuner stored on the study (:data:`~fedhet.experiments.trials.PRUNER_ATTR`); a callback
    bound to a live trial (:meth:`for_trial`) uses its study's pruner. With several processes, the process that logs
    decides and the others follow it.

    Args:
        storage: the study's storage, as :func:`~fedhet.experiments.trials.open_storage` reads it (a journal file or a
            database URL; an in-memory study of another process cannot be reached).
        study_name: the study's name.
        trial_number: the trial's number in the study.
        monitor: the round metric to report; a validation metric (one that starts with ``test`` is refused).

    """

    def __init__(self, storage: str, study_name: str, trial_number: int, monitor: str = "val/acc_mean") -> None:
        self.monitor = trials.check_validation_metric(monitor, "OptunaPruning", "monitor")
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
        ident = trials.trial_id(trial.storage, trial.study.study_name, trial.number)
        callback._connection = (trial.study, trial.storage, ident)
        return callback

    def _connect(self) -> tuple[optuna.Study, Any, int]:
        """The study (with its pruner), its storage and the trial's id, opened once."""
        if self._connection is None:
            import optuna

            storage = trials.open_storage(self.storage)
            study = optuna.load_study(study_name=self.study_name, storage=storage)
            study.pruner = trials.median_pruner(study.user_attrs.get(trials.PRUNER_ATTR))
            self._connection = (study, storage, trials.trial_id(storage, self.study_name, self.trial_number))
        return self._connection

    def on_federation_start(self, trainer: Any, module: Any) -> None:
        """Refuse a monitor that the module computes from a target's labels (its ``target_label_metrics``)."""
        trials.check_label_free(self.monitor, module, "OptunaPruning", "monitor")

    def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
        """Report the round's monitored value; ask the trainer to stop after this round if the trial is pruned."""
        if self.monitor not in metrics:
            return
        value = float(metrics[self.monitor])
        prune = False
        if trainer.is_global_zero:
            study, storage, ident = self._connect()
            if math.isfinite(value):
                storage.set_trial_intermediate_value(ident, round_idx, value)
            prune = bool(study.pruner.prune(study, storage.get_trial(ident)))
            if prune:
                storage.set_trial_user_attr(ident, trials.PRUNED_ATTR, round_idx)
                record = {"trial": self.trial_number, "round": round_idx, "monitor": self.monitor, "value": value}
                (Path(trainer.run_dir) / trials.PRUNED_FILE).write_text(json.dumps(record) + "\n")
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
