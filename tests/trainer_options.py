"""Test shorthand: ``FederatedTrainer`` keyword arguments with the option groups' fields given by their own names.

``trainer_options(rounds=2, accelerator="cpu", stack_clients=3)`` gives
``{"rounds": 2, "processes": Processes(accelerator="cpu", stack_clients=3)}``, so the tests' small trainer factories
take one flat set of settings; a group object given too is updated field by field (``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fedhet.plugins import Checkpointing, ClientStates, Faults, Processes, Reporting

#: flat name -> (trainer argument, group class, field of the group)
FIELDS: dict[str, tuple[str, type, str]] = {
    **{name: ("processes", Processes, name) for name in (f.name for f in dataclasses.fields(Processes))},
    "checkpoint_every": ("checkpointing", Checkpointing, "every"),
    "max_client_failures": ("faults", Faults, "max_client_failures"),
    "client_time_budget_s": ("faults", Faults, "client_time_budget_s"),
    "personal_init": ("client_state", ClientStates, "personal_init"),
    "client_state_budget_mb": ("client_state", ClientStates, "budget_mb"),
    "keep_client_state": ("client_state", ClientStates, "keep_spilled"),
    "eval_every": ("reporting", Reporting, "eval_every"),
    "log_per_client": ("reporting", Reporting, "per_client"),
    "enable_progress_bar": ("reporting", Reporting, "progress_bar"),
}


def trainer_options(**kwargs: Any) -> dict[str, Any]:
    """``kwargs`` with every group field moved into its group (see the module's docstring)."""
    options = {name: value for name, value in kwargs.items() if name not in FIELDS}
    for name, value in kwargs.items():
        if name in FIELDS:
            argument, group, field = FIELDS[name]
            options[argument] = dataclasses.replace(options.get(argument, group()), **{field: value})
    return options
