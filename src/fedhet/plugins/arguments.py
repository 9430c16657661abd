"""The checks of :class:`~fedhet.plugins.FederatedTrainer`'s arguments, each error naming the field at fault."""

from __future__ import annotations

from typing import Any


def check_trainer_arguments(
    rounds: int,
    local_epochs: int,
    local_steps: int | None,
    eval_every: int,
    checkpoint_every: int,
    personal_init: str,
    max_client_failures: float,
    client_state_budget_mb: float | None,
    client_time_budget_s: float | None,
    stack_clients: int | None,
    privacy: Any,
    aggregator: Any,
    start_method: str,
) -> None:
    """Refuse values the trainer cannot run with, before anything starts.

    Raises:
        ValueError: ``FederatedTrainer: field '<name>' ...`` for the first argument out of range, or for two
            arguments that cannot be set together (``stack_clients`` with ``client_time_budget_s``, ``aggregator`` with
            ``privacy``).

    """
    for name, value, low in (("rounds", rounds, 1), ("local_epochs", local_epochs, 1), ("eval_every", eval_every, 1)):
        if value < low:
            raise ValueError(f"FederatedTrainer: field '{name}' must be at least {low}, got {value}")
    if local_steps is not None and local_steps < 1:
        raise ValueError(f"FederatedTrainer: field 'local_steps' must be at least 1, got {local_steps}")
    if checkpoint_every < 0:
        raise ValueError(f"FederatedTrainer: field 'checkpoint_every' must be >= 0, got {checkpoint_every}")
    if client_state_budget_mb is not None and client_state_budget_mb < 0:
        raise ValueError(f"FederatedTrainer: field 'client_state_budget_mb' must be >= 0, got {client_state_budget_mb}")
    if not 0.0 <= max_client_failures <= 1.0:
        raise ValueError(f"FederatedTrainer: field 'max_client_failures' must be in [0, 1], got {max_client_failures}")
    if client_time_budget_s is not None and not client_time_budget_s > 0:
        raise ValueError(
            f"FederatedTrainer: field 'client_time_budget_s' must be positive or None, got {client_time_budget_s}"
        )
    if stack_clients is not None and stack_clients < 1:
        raise ValueError(f"FederatedTrainer: field 'stack_clients' must be at least 1 or None, got {stack_clients}")
    if stack_clients is not None and client_time_budget_s is not None:
        raise ValueError(
            "FederatedTrainer: fields 'stack_clients' and 'client_time_budget_s' cannot both be set: the clients"
            " of a stack train together, so no client's own time is measured"
        )
    if personal_init not in ("shared", "per_client"):
        raise ValueError(
            f"FederatedTrainer: field 'personal_init' must be 'shared' or 'per_client', got {personal_init!r}"
        )
    if start_method not in ("auto", "fork", "popen"):
        raise ValueError(
            f"FederatedTrainer: field 'start_method' must be 'auto', 'fork' or 'popen', got {start_method!r}"
        )
    if privacy is not None and aggregator is not None:
        raise ValueError(
            "FederatedTrainer: field 'aggregator' must be unset when 'privacy' is set: the private aggregate is a"
            " uniform mean of clipped updates plus noise calibrated to that mean, and another aggregator (a median,"
            " a trimmed mean) would not have the guarantee 'privacy/epsilon' reports"
        )
