"""The trainer's policies as objects, the older flags as shorthands, resolved in one place (:func:`resolve_policies`).

A :class:`~fedhet.plugins.FederatedTrainer` composes three policy objects (:mod:`fedhet.plugins.uploads.policies`,
:mod:`fedhet.plugins.clients.runners`): the upload checks every client's upload passes, the server update that turns the
admitted uploads into new shared parameters, and the client runner. Each can be given as an object; the older flags
stay as shorthands for the common ones:

==================================  ========================================================
shorthand                           policy object
==================================  ========================================================
``server_update=<Aggregator>``      ``PlainUpdate(aggregator)``
``server_update=<UploadPrivacy>``   ``PrivateUpdate(privacy)`` with the run's seed
``processes.stack_clients=n``       ``runner=StackedRunner(n)``
``faults.client_time_budget_s=s``   ``TimeBudget(s)`` after the ``upload_checks``
==================================  ========================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fedhet.plugins.clients.runners import ClientRunner, SequentialRunner
from fedhet.plugins.clients.stacked import StackedRunner
from fedhet.plugins.rounds.options import Faults, Processes
from fedhet.plugins.uploads.aggregators import Aggregator
from fedhet.plugins.uploads.policies import FiniteUpload, ServerUpdate, TimeBudget, UploadCheck, server_update_for
from fedhet.plugins.uploads.privacy import UploadPrivacy


@dataclass
class Policies:
    """The policy objects a trainer runs with.

    Args:
        upload_checks: the checks after :class:`~fedhet.plugins.uploads.policies.DeclaredUpload` (which the client
            context puts first): :class:`~fedhet.plugins.FiniteUpload`, then the user's, then a time budget.
        server_update: the server update, or ``None`` for the module's ``configure_aggregator()`` folded plainly
            (known only once the module is).
        runner: the client runner.

    """

    upload_checks: list[UploadCheck]
    server_update: ServerUpdate | None
    runner: ClientRunner


def resolve_policies(
    upload_checks: Sequence[UploadCheck] | None,
    server_update: ServerUpdate | Aggregator | UploadPrivacy | None,
    runner: ClientRunner | None,
    processes: Processes,
    faults: Faults,
    seed: int,
) -> Policies:
    """The trainer's policy objects from its arguments, shorthands expanded (see the module's table).

    Raises:
        ValueError: ``FederatedTrainer: ...`` for a shorthand given together with the object it stands for
            (``processes.stack_clients`` with ``runner``), or for policies that cannot run together (a stacked
            runner with a time budget: the clients of a stack train together, so no client's own time is measured).

    """
    if processes.stack_clients is not None and runner is not None:
        raise ValueError(
            "FederatedTrainer: field 'processes.stack_clients' is a shorthand for 'runner', so they cannot both be set"
        )
    resolved_runner = (
        runner
        if runner is not None
        else StackedRunner(processes.stack_clients)
        if processes.stack_clients is not None
        else SequentialRunner()
    )
    checks: list[UploadCheck] = [FiniteUpload(), *(upload_checks or [])]
    if faults.client_time_budget_s is not None:
        checks.append(TimeBudget(faults.client_time_budget_s))
    if isinstance(resolved_runner, StackedRunner) and any(isinstance(check, TimeBudget) for check in checks):
        raise ValueError(
            "FederatedTrainer: a stacked runner ('runner' or 'processes.stack_clients') and a client time budget"
            " ('faults.client_time_budget_s' or a TimeBudget upload check) cannot both be set: the clients of a stack"
            " train together, so no client's own time is measured"
        )
    return Policies(checks, server_update_for(server_update, seed), resolved_runner)
