"""The server step's guard: a callback that raises or makes the server state non-finite is named with its round."""

from __future__ import annotations

from typing import Any

from fedhet.core import ServerState, non_finite
from fedhet.plugins.hooks import CallbackHooks


class ServerStepError(RuntimeError):
    """The server step of a round failed: raised before the round is evaluated or checkpointed."""


def check_server_state(server_state: ServerState, round_idx: int, source: str) -> None:
    """Refuse a server state holding NaN/Inf, naming the round and what produced it.

    Args:
        server_state: the state after ``source`` ran.
        round_idx: the round, for the message.
        source: what last changed the state (``"the aggregator"``, ``"callback 'X' (on_aggregate_end)"``).

    Raises:
        ServerStepError: naming the round, ``source`` and the non-finite tensors, so that the run stops before the
            state is broadcast, evaluated or saved over the last good checkpoint.

    """
    bad = non_finite(server_state.shared, server_state.statistics)
    bad += [f"{cid}/{name}" for cid, payload in server_state.per_client.items() for name in non_finite(payload)]
    if bad:
        raise ServerStepError(
            f"round {round_idx}: {source} made the server state non-finite (NaN/Inf in {bad}); the run stops before"
            " evaluating or checkpointing it, and the last checkpoint is the one of the round before"
        )


def run_server_hook(hooks: CallbackHooks, hook: str, round_idx: int, server_state: ServerState, **kwargs: Any) -> None:
    """Call a server-side ``hook`` callback by callback, checking the server state after each.

    Raises:
        ServerStepError: naming the round and the callback when its hook raises (chained to its error) or leaves a
            non-finite server state (:func:`check_server_state`).

    """
    for callback, run in hooks.each(hook, round_idx=round_idx, server_state=server_state, **kwargs):
        name = f"callback '{type(callback).__qualname__}' ({hook})"
        try:
            run()
        except Exception as err:
            raise ServerStepError(f"round {round_idx}: {name} raised {type(err).__name__}: {err}") from err
        check_server_state(server_state, round_idx, name)
