"""The shared vocabulary of tuning: what a tuner and the pruning callback of a fit in another process agree on.

The storage a study lives in (:func:`open_storage`), the pruning rule (:func:`median_pruner`) and its settings
stored on the study, the marks a pruned trial and its run folder get, and the rule that tuning reads validation
metrics only (:func:`check_validation_metric`). Used by :class:`~fedhet.experiments.pruning.OptunaPruning` and
:mod:`fedhet.experiments.tuning`; Optuna is imported when a function here needs it, so the pruning callback of a fit
that is not tuned costs nothing.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def check_label_free(metric: str, module: type | object, owner: str, field: str) -> str:
    """``metric``, refused when ``module`` (a module or its class) declares that it reads a target's labels.

    A module lists such metrics in ``target_label_metrics`` (``fnmatch`` patterns; see
    :attr:`fedhet.modules.FederatedModule.target_label_metrics`): choosing hyperparameters on one of them reads the
    labels that domain adaptation holds back.

    Raises:
        ValueError: naming the owner, the field, the metric and the module's class.

    Example:
        >>> class DA:
        ...     target_label_metrics = ("*/acc_*",)
        >>> check_label_free("val/source_acc_mean", DA, "tuning", "metric")
        'val/source_acc_mean'

    """
    cls = module if isinstance(module, type) else type(module)
    patterns = getattr(cls, "target_label_metrics", ())
    if any(fnmatchcase(metric, pattern) for pattern in patterns):
        raise ValueError(
            f"{owner}: field '{field}' is {metric!r}, which {cls.__name__} computes from the target's labels"
            f" (its target_label_metrics: {', '.join(patterns)}); choose on a metric that reads none of them"
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


RANDOM_TRIALS = 10
"""TPE's start-up trials, drawn at random before it models the others (Optuna's default)."""

WARMUP_ROUNDS = 1
"""Rounds of a trial's fit before the median rule may prune it (the suites' setting: from its second round)."""

PRUNING_MIN_STARTUP = 10
"""The fewest complete trials before any trial is pruned (:func:`pruning_startup`)."""


def pruning_startup(n_trials: int) -> int:
    """Complete trials before the median rule may prune one: ``max(10, ceil(n_trials / 2))``.

    A budget of 10 trials or fewer is never pruned, and at most half of a larger one can be: a median over a handful
    of trials after a round or two removes trials by noise (issue 39: with 8 trials and Optuna's 5 start-up trials,
    1 to 3 of each method's trials were pruned after round 1), and a small budget has no trial to spare.

    Example:
        >>> [pruning_startup(n) for n in (4, 10, 16, 40)]
        [10, 10, 10, 20]

    """
    return max(PRUNING_MIN_STARTUP, -(-n_trials // 2))


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


def trial_id(storage: Any, study_name: str, number: int) -> int:
    """The storage's id of trial ``number`` of the study ``study_name``."""
    return int(storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study_name), number))
