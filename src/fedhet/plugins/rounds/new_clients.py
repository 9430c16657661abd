"""New-client evaluation: clients held out of training join the final federation, adapt, and are scored.

As PFLlib's ``num_new_clients``, and as FLIC's clients that join late (Rakotomamonjy et al., TMLR 2024, S1.4): each
client that :class:`~fedhet.plugins.NewClients` held out starts from what the federation ends with (the
server's shared parameters and broadcast statistics, personal layers initialised as any new client's), runs its
method's ``new_client_phases()`` for a budget of ``adapt_epochs`` epochs per phase, the same for every method, and is
scored on its own test split. It works on a module of its own: the server state, the client store and every training
client are left as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

from lightning.fabric.utilities.apply_func import move_data_to_device

from fedhet.core import EngineModule, LocalPhase
from fedhet.core.seeding import derive_seed, rng_preserved, seeded
from fedhet.plugins.clients.context import ClientContext, ClientEvaluation
from fedhet.plugins.clients.local_loop import evaluate_client, run_local_training

NEW_CLIENT_STAGE = "test_new"
"""The prefix of the new clients' metrics: ``test_new/<metric>_mean``, ``_weighted``, ``_worst``."""


def new_client_phases(module: EngineModule, adapt_epochs: int) -> list[LocalPhase]:
    """The module's ``new_client_phases()``, each lasting ``adapt_epochs`` epochs (its own length replaced).

    Raises:
        TypeError: naming the module, when it has no ``new_client_phases`` (a ``FederatedModule`` always has).

    """
    phases = getattr(module, "new_client_phases", None)
    if phases is None:
        raise TypeError(
            f"{type(module).__name__} has no new_client_phases(): new-client evaluation needs a FederatedModule"
        )
    return [dataclasses.replace(phase, epochs=adapt_epochs, steps=None) for phase in phases()]


def new_client_module(context: ClientContext, client_id: str) -> EngineModule:
    """A fresh module for ``client_id`` as it joins: initial personal layers, the server's payload and statistics."""
    module = context.build(client_id, context.init_seed(client_id))
    server = context.server_state
    state = {**context.initial_personal(client_id), **server.payload_for(client_id, context.slot(client_id).shared)}
    module.load_state_dict(state, strict=False)
    if server.statistics:
        module.receive_statistics(move_data_to_device(server.statistics, context.fabric.device))
    return module


def adapt_new_client(context: ClientContext, client_id: str, adapt_epochs: int, round_idx: int) -> EngineModule:
    """``client_id``'s module after its new-client adaptation on its training split (seeded by the run's seed)."""
    module = new_client_module(context, client_id)
    phases = new_client_phases(module, adapt_epochs)
    if phases:
        loader = context.client_data(client_id).train_dataloader()
        with seeded(derive_seed(context.seed, "new_client", round_idx, client_id), [context.fabric.device]):
            run_local_training(context.fabric, module, loader, phases, adapt_epochs, None)
    return module


def evaluate_new_clients(
    context: ClientContext, client_ids: Sequence[str], adapt_epochs: int, round_idx: int
) -> dict[str, ClientEvaluation]:
    """Adapt each held-out client of ``client_ids`` (those this process owns) and score it on its test split.

    Args:
        context: the run's client context, holding the final server state.
        client_ids: held-out clients, never trained.
        adapt_epochs: epochs of each of their adaptation phases.
        round_idx: the round the federation ended (seeds the adaptation's draws).

    Returns:
        each scored client's evaluation; a client without a test split is left out. An error is raised, not
        recorded: a new client's adaptation is part of the experiment.

    """
    evaluations: dict[str, ClientEvaluation] = {}
    with rng_preserved([context.fabric.device]):
        for client_id in client_ids:
            loader = context.client_data(client_id).test_dataloader()
            if not loader:
                continue
            module = adapt_new_client(context, client_id, adapt_epochs, round_idx)
            values = evaluate_client(context.fabric, module, loader, "test")
            directions = {name: bool(m.higher_is_better) for name, m in module.evaluation_metrics("test").items()}
            evaluations[client_id] = ClientEvaluation(values, len(cast(Any, loader).dataset), directions)
    return evaluations
