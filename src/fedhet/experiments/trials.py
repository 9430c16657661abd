"""The shared vocabulary of tuning: what a tuner and the pruning callback of a fit in another process agree on.

The storage a study lives in (:func:`open_storage`), the pruning rule (:func:`median_pruner`) and its settings
stored on the study, the marks a pruned trial and its run folder get, and the rule that tuning reads validation
metrics only (:func:`check_validation_metric`). Used by :class:`~fedhet.experiments.pruning.OptunaPruning` and
:mod:`fedhet.experiments.tuning`; Optuna is imported when a function here needs it, so the pruning callback of a fit
that is not tuned costs nothing.
"""

from __future__ import annotations

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


def trial_id(storage: Any, study_name: str, number: int) -> int:
    """The storage's id of trial ``number`` of the study ``study_name``."""
    return int(storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study_name), number))
