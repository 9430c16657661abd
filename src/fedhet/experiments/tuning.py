"""Hyperparameter tuning with Optuna, on validation splits only, with the same trial budget for every method.

:func:`tune` searches a :class:`~fedhet.experiments.search_space.SearchSpace` with a seeded Optuna sampler
(:data:`~fedhet.experiments.search_space.SAMPLERS`: TPE by default, Bergstra et al., 2011, "Algorithms for
Hyper-Parameter Optimization", NeurIPS; random search; a grid where the space is finite; CMA-ES, Hansen, 2016, "The
CMA Evolution Strategy: A Tutorial") and prunes trials from their round metrics with the median rule
(:func:`fedhet.experiments.trials.median_pruner`), never before :func:`~fedhet.experiments.trials.pruning_startup`
trials have completed. The objective gets a trial's config overrides and a :class:`TrialHandle`, trains, and returns
one number.

**The objective must be computed on validation splits only.** Test splits score the chosen setting once, on fresh
seeds, after tuning; a setting chosen by looking at test accuracy makes that accuracy optimistic. Hence
:func:`objective_value` and :class:`~fedhet.experiments.pruning.OptunaPruning` refuse metrics that start with
``test``. Every federation of :mod:`fedhet.datamodules` can hold out a seeded validation part of each client's
training rows (``val_fraction``, or the dataset's own held-out option such as ``VowelFederation(val_repetitions=...)``
and ``CovertypeFederation(num_val=...)``); a run without one logs no ``val/`` metric and :func:`objective_value` says
which option to set. For domain adaptation, where the target's labels may not be read, FedDaDiL logs
``val/source_acc_mean`` (:data:`SOURCE_VALIDATION_METRIC`): the mean validation accuracy of the labelled source
clients, with the target's labels never read (source validation; see :class:`~fedhet.modules.FedDaDiL`).

The budget is ``n_trials`` trials per study (one study per method): trials that finished, were pruned or are running
count, in this process or any other sharing the study, so a resumed study or several processes together run
``n_trials`` in all. Storage (``storage``): ``None`` keeps the study in memory; a path ending in ``.log``/``.jsonl`` is
a journal file that processes on one machine, or on machines sharing a file system, append to; a URL
(``sqlite:///tuning.db``, ``postgresql://...``) a database. With a file (journal or SQLite) the budget is exact:
counting and starting a trial happen under a lock beside the file (Optuna's symbolic-link lock, safe on NFS). With a
database server, processes that start trials at the same moment may start one each beyond the budget; such a trial
is recorded as failed, with the user attribute ``fedhet_surplus``, and never run. A trial left running by a process
that was killed is marked failed (and no longer counted) when a process on the same machine joins the study; its
owner is named by host, pid and the process's start time (:mod:`~fedhet.experiments.trial_owner`), so a pid reused
by another process does not keep it alive. A journal whose last record a killed process left half-written is repaired
when a study opens it, and one damaged elsewhere is refused naming the file and the line
(:mod:`~fedhet.experiments.journal`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.storages.journal import JournalFileSymlinkLock
from optuna.trial import TrialState

from fedhet.core.seeding import derive_seed
from fedhet.experiments.journal import repair_journal
from fedhet.experiments.search_space import SearchSpace, sampler_problem
from fedhet.experiments.trial_owner import OWNER_ATTR, owner_token, release_dead_trials
from fedhet.experiments.trials import (
    JOURNAL_SUFFIXES,
    PRUNED_ATTR,
    PRUNER_ATTR,
    RANDOM_TRIALS,
    WARMUP_ROUNDS,
    check_validation_metric,
    median_pruner,
    open_storage,
    pruning_startup,
    trial_id,
)

if TYPE_CHECKING:
    from fedhet.experiments.pruning import OptunaPruning

__all__ = [
    "SOURCE_VALIDATION_METRIC",
    "SearchSpace",
    "TrialHandle",
    "TrialRecord",
    "TuningResult",
    "objective_value",
    "study_trials",
    "tune",
]

SOURCE_VALIDATION_METRIC = "val/source_acc_mean"
"""Domain adaptation's tuning criterion: mean validation accuracy over the labelled source clients (FedDaDiL)."""

SAMPLER_ATTR = "fedhet_sampler"
"""The study's user attribute naming its sampler: a study is never continued with another."""

OVERRIDES_ATTR = "fedhet_overrides"
SURPLUS_ATTR = "fedhet_surplus"
_COUNTED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a study, as the results report it.

    Attributes:
        number: the trial's number in the study.
        state: ``"COMPLETE"``, ``"PRUNED"``, ``"RUNNING"``, ``"FAIL"`` or ``"WAITING"``.
        overrides: the config overrides it ran (empty for a surplus trial).
        value: its objective value (``None`` unless complete; a pruned trial's last reported value otherwise).
        pruned_round: the round after which its fit was pruned, if it was.

    """

    number: int
    state: str
    overrides: dict[str, Any]
    value: float | None
    pruned_round: int | None


@dataclass(frozen=True)
class TuningResult:
    """What a study chose.

    Attributes:
        best_overrides: the config overrides of the best complete trial.
        best_value: its objective value.
        trials: every trial of the study, in number order.

    """

    best_overrides: dict[str, Any]
    best_value: float
    trials: list[TrialRecord]


class TrialHandle:
    """What an objective gets for one trial: its number, in-process pruning, and pruning of a fit in another process.

    Args:
        trial: the Optuna trial.
        storage: the study's storage string (``None``: in memory).

    """

    def __init__(self, trial: optuna.Trial, storage: str | None) -> None:
        self._trial = trial
        self._storage = storage

    @property
    def number(self) -> int:
        """The trial's number in the study (0, 1, ...; unique across the processes that share the study)."""
        return self._trial.number

    @property
    def study_name(self) -> str:
        """The study's name."""
        return self._trial.study.study_name

    def report(self, value: float, step: int) -> None:
        """Report the validation value reached after round ``step`` (in-process use)."""
        self._trial.report(value, step)

    def should_prune(self) -> bool:
        """Whether the pruner stops this trial after the last reported round (in-process use)."""
        return self._trial.should_prune()

    def callback(self, monitor: str = "val/acc_mean") -> OptunaPruning:
        """A pruning callback for a ``FederatedTrainer`` run in this process (``callbacks=[handle.callback()]``)."""
        from fedhet.experiments.pruning import OptunaPruning  # Lightning, only for a fit in this process

        return OptunaPruning.for_trial(self._trial, monitor)

    def cli_args(self, monitor: str = "val/acc_mean") -> list[str]:
        """Arguments that add the pruning callback to a ``fedhet fit`` command run in another process.

        Args:
            monitor: the validation round metric to report each evaluated round.

        Raises:
            ValueError: when the study is in memory (another process cannot reach it) or ``monitor`` is a test metric.

        Example: ``fedhet fit -c config.yaml --trainer.rounds 20 *handle.cli_args()``.

        """
        check_validation_metric(monitor, "tuning", "monitor")
        if self._storage is None:
            raise ValueError(
                f"tuning: study '{self.study_name}' is in memory, so a fit in another process cannot report to it;"
                " give a journal file (.log/.jsonl) or a database URL as the storage"
            )
        return [
            "--trainer.callbacks+=fedhet.experiments.pruning.OptunaPruning",
            f"--trainer.callbacks.storage={self._storage}",
            f"--trainer.callbacks.study_name={self.study_name}",
            f"--trainer.callbacks.trial_number={self.number}",
            f"--trainer.callbacks.monitor={monitor}",
        ]

    @property
    def pruned(self) -> bool:
        """Whether a pruning callback stopped this trial's fit (in this process or another)."""
        trial = self._trial
        frozen = trial.storage.get_trial(trial_id(trial.storage, trial.study.study_name, trial.number))
        return PRUNED_ATTR in frozen.user_attrs

    def raise_if_pruned(self) -> None:
        """Raise ``optuna.TrialPruned`` when the trial's fit was pruned (:func:`tune` also checks it by itself)."""
        if self.pruned:
            raise optuna.TrialPruned(f"trial {self.number} was pruned")


def objective_value(history: Sequence[Mapping[str, Any]], metric: str) -> float:
    """The value of a validation round metric in the last round that logged it: what a trial scores.

    Args:
        history: the run's round metrics in round order (``trainer.history``, or the rows of its ``metrics.csv``).
        metric: a validation round metric, e.g. ``"val/acc_mean"`` or :data:`SOURCE_VALIDATION_METRIC`.

    Raises:
        ValueError: when ``metric`` is a test metric, or no round logged it (the federation holds no validation
            split: the message says how to give it one).

    Example:
        >>> objective_value([{"val/acc_mean": 0.5}, {"train/loss_mean": 1.0}, {"val/acc_mean": 0.75}], "val/acc_mean")
        0.75

    """
    check_validation_metric(metric, "tuning", "metric")
    for row in reversed(history):
        value = row.get(metric)
        if value is not None and value != "":
            return float(value)
    raise ValueError(
        f"tuning: no round of the run logged {metric!r}; the federation holds no validation split: set"
        " data.init_args.val_fraction (or the dataset's held-out validation option, e.g. val_repetitions, num_val)"
    )


def _absolute(storage: str | None) -> str | None:
    """A journal file's absolute path (a fit in another folder reaches the same file); URLs unchanged."""
    if storage is not None and storage.endswith(JOURNAL_SUFFIXES):
        return str(Path(storage).absolute())
    return storage


@contextmanager
def _symlink_lock(path: str) -> Iterator[None]:
    """Optuna's journal-file lock (a symbolic link: safe on NFS) on ``path``; a holder's crash is cleared in 30 s."""
    lock = JournalFileSymlinkLock(path, grace_period=30)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _lock(storage: str | None) -> Callable[[], AbstractContextManager[None]]:
    """A lock beside the storage's file (journal or SQLite), under which the budget is counted and a trial started.

    Returns a function giving a new context manager each time (the lock is not re-entrant); with no file, no lock.
    """
    if storage is not None and storage.endswith(JOURNAL_SUFFIXES):
        path = f"{storage}.budget"
    elif storage is not None and storage.startswith("sqlite:///") and len(storage) > len("sqlite:///"):
        path = f"{storage[len('sqlite:///') :]}.budget"
    else:
        return nullcontext
    return lambda: _symlink_lock(path)


@contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's per-trial INFO lines off while tuning (fedhet's runs print their own progress)."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _start_trial(
    study: optuna.Study,
    n_trials: int,
    lock: Callable[[], AbstractContextManager[None]],
    sampler: Callable[[int], optuna.samplers.BaseSampler],
) -> optuna.Trial | None:
    """Start the next trial if the study's budget allows it; ``None`` when ``n_trials`` are done or under way.

    The trial is asked with ``sampler(number)``, ``number`` the trial's number in the study (exact under the lock; a
    database server's concurrent processes may shift it, which changes only their draws), since a grid and CMA-ES
    choose the trial's point when it is asked.
    """
    with lock():
        if len(study.get_trials(deepcopy=False, states=_COUNTED)) >= n_trials:
            return None
        study.sampler = sampler(len(study.get_trials(deepcopy=False)))
        trial = study.ask()
        trial.set_user_attr(OWNER_ATTR, owner_token())
    earlier = [t for t in study.get_trials(deepcopy=False, states=_COUNTED) if t.number < trial.number]
    if len(earlier) >= n_trials:  # started at the same moment as another process's last trial (database server)
        trial.set_user_attr(SURPLUS_ATTR, True)
        study.tell(trial, state=TrialState.FAIL)
        return None
    return trial


def _record(frozen: optuna.trial.FrozenTrial) -> TrialRecord:
    value = frozen.value
    if value is None and frozen.intermediate_values:
        value = frozen.intermediate_values[max(frozen.intermediate_values)]
    return TrialRecord(
        number=frozen.number,
        state=frozen.state.name,
        overrides=dict(frozen.user_attrs.get(OVERRIDES_ATTR, {})),
        value=value,
        pruned_round=frozen.user_attrs.get(PRUNED_ATTR),
    )


class _Grid(optuna.samplers.GridSampler):
    """Optuna's grid search, whose study ends with its budget: :func:`tune` runs no more trials than grid points.

    (Optuna's own stops the study once the grid is covered, which only an ``optimize`` loop allows.)
    """

    def after_trial(self, study: optuna.Study, trial: Any, state: TrialState, values: Sequence[float] | None) -> None:
        """Nothing: the budget, checked before the first trial (:func:`sampler_problem`), ends the study."""


def _sampler(
    name: str, space: SearchSpace, seed: int, trial_number: int, *, random_trials: int
) -> optuna.samplers.BaseSampler:
    """Trial ``trial_number``'s sampler, seeded from ``(seed, name, trial_number)``.

    A grid's order comes from ``(seed, name)`` alone: its points are numbered once for the study, and each trial
    takes an unvisited one.
    """
    trial_seed = derive_seed(seed, name, trial_number) % 2**32
    if name == "random":
        return optuna.samplers.RandomSampler(seed=trial_seed)
    if name == "grid":
        return _Grid(space.grid() or {}, seed=derive_seed(seed, name) % 2**32)  # one grid order per study
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(
            n_startup_trials=random_trials, seed=trial_seed, warn_independent_sampling=False
        )
    return optuna.samplers.TPESampler(  # constant liar: running trials' points are not drawn again
        n_startup_trials=random_trials, seed=trial_seed, constant_liar=True
    )


def tune(
    study_name: str,
    space: SearchSpace,
    objective: Callable[[dict[str, Any], TrialHandle], float],
    n_trials: int,
    storage: str | None,
    seed: int,
    direction: str = "maximize",
    *,
    random_trials: int = RANDOM_TRIALS,
    pruner_startup_trials: int | None = None,
    warmup_rounds: int = WARMUP_ROUNDS,
    sampler: str = "tpe",
) -> TuningResult:
    """Run trials of ``objective`` until the study holds ``n_trials`` (counting every process's), then report it.

    Each trial draws its overrides from ``space`` with ``sampler`` (TPE and CMA-ES draw their first
    ``random_trials`` at random), seeded from ``(seed, sampler, trial number)``: one process always draws the same
    trials, and processes sharing a study draw different ones. ``objective(overrides, handle)`` trains on validation
    data and returns the score; raising
    ``optuna.TrialPruned``, or a fit stopped by :class:`~fedhet.experiments.pruning.OptunaPruning`
    (``handle.pruned``), records the trial as pruned; a non-finite score records the worst value; any other
    exception marks the trial failed (not counted, so a resumed study runs it again) and propagates.

    Args:
        study_name: the study (one per method and federation); created, or joined when the storage holds it.
        space: the overrides to search.
        objective: ``(overrides, handle) -> validation score``.
        n_trials: the study's budget, over all processes.
        storage: ``None`` (in memory), a journal file (``.log``/``.jsonl``) or a database URL.
        seed: seeds the sampler.
        direction: ``"maximize"`` or ``"minimize"``.
        random_trials: TPE's (and CMA-ES's) random start-up trials.
        pruner_startup_trials: trials that complete before any trial is pruned (``None``:
            :func:`~fedhet.experiments.trials.pruning_startup` of ``n_trials``, so a small budget is never pruned).
        warmup_rounds: rounds of a trial before it may be pruned.
        sampler: one of :data:`~fedhet.experiments.search_space.SAMPLERS` (what each needs:
            :func:`~fedhet.experiments.search_space.sampler_problem`).

    Returns:
        the best complete trial's overrides and value, and every trial.

    Raises:
        ValueError: for a bad budget, direction or sampler (:func:`sampler_problem`), a study created with another
            direction, pruner or sampler, or when no trial completed.
        JournalDamagedError: when the journal file holds an unreadable record before its last line
            (:func:`~fedhet.experiments.journal.repair_journal`).

    """
    if n_trials < 1:
        raise ValueError(f"tuning: field 'n_trials' must be at least 1, got {n_trials}")
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"tuning: field 'direction' must be 'maximize' or 'minimize', got {direction!r}")
    problem = sampler_problem(sampler, space, n_trials)
    if problem is not None:
        raise ValueError(f"tuning: field 'sampler': {problem}")
    storage = _absolute(storage)
    startup = pruning_startup(n_trials) if pruner_startup_trials is None else pruner_startup_trials
    settings = {"startup_trials": startup, "warmup_rounds": warmup_rounds}
    lock = _lock(storage)
    with _quiet_optuna():
        with lock():
            if storage is not None and storage.endswith(JOURNAL_SUFFIXES):
                repair_journal(storage)
            study = optuna.create_study(
                study_name=study_name,
                storage=open_storage(storage),
                direction=direction,  # type: ignore[arg-type]
                pruner=median_pruner(settings),
                load_if_exists=True,
            )
            if study.direction.name.lower() != direction:
                raise ValueError(
                    f"tuning: study '{study_name}' was created to {study.direction.name.lower()}, not to {direction}"
                )
            stored = study.user_attrs.get(PRUNER_ATTR)
            if stored is None:
                study.set_user_attr(PRUNER_ATTR, settings)
            elif stored != settings:
                raise ValueError(f"tuning: study '{study_name}' was created with pruner {stored}, not {settings}")
            used = study.user_attrs.get(SAMPLER_ATTR, "tpe" if study.trials else sampler)  # older studies: TPE
            if used != sampler:
                raise ValueError(f"tuning: study '{study_name}' was created with sampler {used}, not {sampler}")
            study.set_user_attr(SAMPLER_ATTR, sampler)
            release_dead_trials(study)
        draw = functools.partial(_sampler, sampler, space, seed, random_trials=random_trials)
        while (trial := _start_trial(study, n_trials, lock, draw)) is not None:
            _run_trial(study, trial, space, objective, storage)
        return _result(study)


def _run_trial(
    study: optuna.Study,
    trial: optuna.Trial,
    space: SearchSpace,
    objective: Callable[[dict[str, Any], TrialHandle], float],
    storage: str | None,
) -> None:
    """Run one trial of ``objective`` and tell the study how it ended."""
    handle = TrialHandle(trial, storage)
    try:
        overrides = space.suggest(trial)
        trial.set_user_attr(OVERRIDES_ATTR, overrides)
        value = float(objective(overrides, handle))
    except optuna.TrialPruned:
        study.tell(trial, state=TrialState.PRUNED)
        return
    except BaseException:
        study.tell(trial, state=TrialState.FAIL)
        raise
    if handle.pruned:
        study.tell(trial, state=TrialState.PRUNED)
    elif math.isfinite(value):
        study.tell(trial, value)
    else:
        trial.set_user_attr("fedhet_non_finite", str(value))
        study.tell(trial, -math.inf if study.direction.name == "MAXIMIZE" else math.inf)


def study_trials(study_name: str, storage: str | None) -> list[TrialRecord]:
    """Every trial of a stored study, in number order (none when the storage holds no study of that name)."""
    with _quiet_optuna():
        try:
            study = optuna.load_study(study_name=study_name, storage=open_storage(_absolute(storage)))
        except KeyError:
            return []
        return [_record(t) for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)]


def _result(study: optuna.Study) -> TuningResult:
    trials = [_record(t) for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)]
    complete = [t for t in trials if t.state == "COMPLETE" and t.value is not None]
    if not complete:
        raise ValueError(f"tuning: study '{study.study_name}' has no complete trial (every one was pruned or failed)")
    best = study.best_trial
    return TuningResult(dict(best.user_attrs.get(OVERRIDES_ATTR, {})), float(best.value), trials)  # type: ignore[arg-type]
