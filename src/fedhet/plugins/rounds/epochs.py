"""A federation's length in epochs: the rounds and evaluation period that a number of local epochs takes.

Most methods make one pass over their clients' data (or the trainer's ``local_epochs``) per round, so an epoch is one
round. A method whose round is a fraction of an epoch (Global Layers' ``aggregate_every="step"``: one optimizer step
per round, ``B`` rounds per epoch) says how many rounds make one epoch with ``rounds_per_epoch()``; the user states
epochs and :func:`epoch_schedule` gives the trainer's ``rounds`` and ``eval_every``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@runtime_checkable
class CountsRoundsPerEpoch(Protocol):
    """A module whose epoch of local training spans several federation rounds."""

    def rounds_per_epoch(self) -> int:
        """How many rounds make one epoch of local training (``>= 1``)."""
        ...


@dataclass(frozen=True)
class EpochSchedule:
    """The trainer's round counts for a length stated in epochs.

    Args:
        rounds: federation rounds, ``epochs * rounds_per_epoch``.
        eval_every: rounds between evaluations, ``eval_every_epochs * rounds_per_epoch``.

    """

    rounds: int
    eval_every: int


def epoch_schedule(module: object, epochs: int, eval_every_epochs: int = 1) -> EpochSchedule:
    """The rounds and evaluation period of ``epochs`` epochs of ``module`` (one round per epoch unless it says more).

    Args:
        module: the method's module; its ``rounds_per_epoch()`` is read when it has one, else an epoch is one round.
        epochs: how many epochs of local training the federation runs.
        eval_every_epochs: evaluate after every this many epochs.

    Raises:
        ValueError: naming the field, when ``epochs``, ``eval_every_epochs`` or the module's rounds an epoch is < 1.

    Example:
        >>> epoch_schedule(object(), epochs=10)
        EpochSchedule(rounds=10, eval_every=1)

    """
    if epochs < 1 or eval_every_epochs < 1:
        raise ValueError(f"epochs and eval_every_epochs must be >= 1, got {epochs} and {eval_every_epochs}")
    per_epoch = module.rounds_per_epoch() if isinstance(module, CountsRoundsPerEpoch) else 1
    if per_epoch < 1:
        raise ValueError(f"{type(module).__name__}: rounds_per_epoch() must be >= 1, got {per_epoch}")
    return EpochSchedule(rounds=epochs * per_epoch, eval_every=eval_every_epochs * per_epoch)
