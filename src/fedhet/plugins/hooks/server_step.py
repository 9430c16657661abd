"""The server step's guard: each server callback runs in its method's order and is held to its declared access.

A callback that raises, makes the server state non-finite, or writes a broadcast statistic or per-client payload entry
it does not declare (:class:`~fedhet.core.ServerAccess`) is named with its round; callbacks that read what another
writes must run after it (:func:`check_server_order`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from torch import Tensor

from fedhet.core import ServerAccess, ServerState, non_finite
from fedhet.plugins.hooks.dispatch import CallbackHooks

#: An entry's tensor (held, so that no new tensor can take its identity) and its in-place version counter.
_Mark = tuple[Tensor, int]
#: Marks of the broadcast statistics, and of each client's per-client payload.
_Snapshot = tuple[dict[str, _Mark], dict[str, dict[str, _Mark]]]


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


def server_access(callback: object) -> ServerAccess:
    """What ``callback`` declares it reads and writes in the server state (nothing when it declares nothing)."""
    access = getattr(callback, "server_access", None)
    return access if isinstance(access, ServerAccess) else ServerAccess()


def check_server_order(callbacks: Iterable[object]) -> None:
    """Refuse callbacks, in calling order, whose declared server-state access cannot give one answer per round.

    A callback that reads a broadcast statistic runs after every callback that writes it (a method states the order
    of its callbacks in ``configure_callbacks()``, and the engine keeps it), and no two callbacks write the same
    statistic or per-client payload entry.

    Raises:
        ValueError: naming both callbacks and the entry.

    Example:
        >>> class W:
        ...     server_access = ServerAccess(writes=["g"])
        >>> class R:
        ...     server_access = ServerAccess(reads=["g"])
        >>> check_server_order([W(), R()])
        >>> check_server_order([R(), W()])
        Traceback (most recent call last):
        ...
        ValueError: callback 'R' reads server statistic 'g', which callback 'W' writes after it: list 'W' before 'R'

    """
    earlier: list[tuple[str, ServerAccess]] = []
    for callback in callbacks:
        name, access = type(callback).__qualname__, server_access(callback)
        for other, before in earlier:
            read_early = sorted(access.writes & before.reads)
            if read_early:
                raise ValueError(
                    f"callback '{other}' reads server statistic '{read_early[0]}', which callback '{name}' writes"
                    f" after it: list '{name}' before '{other}'"
                )
            both = sorted(access.writes & before.writes)
            if both:
                raise ValueError(f"callbacks '{other}' and '{name}' both write server statistic '{both[0]}'")
            overlap = [
                (mine, theirs)
                for mine in sorted(access.per_client)
                for theirs in sorted(before.per_client)
                if fnmatchcase(mine, theirs) or fnmatchcase(theirs, mine)
            ]
            if overlap:
                raise ValueError(
                    f"callbacks '{other}' and '{name}' both write per-client payload entries"
                    f" '{overlap[0][1]}' and '{overlap[0][0]}'"
                )
        earlier.append((name, access))


def _marks(tensors: Mapping[str, Tensor]) -> dict[str, _Mark]:
    """Each entry's tensor and version counter (an in-place change bumps it)."""
    try:
        return {name: (t, t._version) for name, t in tensors.items()}
    except RuntimeError:  # an inference tensor among them
        return {name: (t, _version(t)) for name, t in tensors.items()}


def _version(tensor: Tensor) -> int:
    """The tensor's in-place version counter (0 for a tensor that keeps none)."""
    try:
        return int(tensor._version)
    except RuntimeError:  # an inference tensor keeps no version counter: its identity tells replacements only
        return 0


def _changed(before: Mapping[str, _Mark], after: Mapping[str, Tensor]) -> list[str]:
    """Names of ``after`` added, replaced or changed in place since ``before``, and the names removed since."""
    changed = [name for name in before if name not in after]
    for name, tensor in after.items():
        mark = before.get(name)
        if mark is None or mark[0] is not tensor or mark[1] != _version(tensor):
            changed.append(name)
    return changed


def _snapshot(server_state: ServerState) -> _Snapshot:
    """Marks of the broadcast statistics and of every per-client payload."""
    return _marks(server_state.statistics), {cid: _marks(p) for cid, p in server_state.per_client.items()}


def _undeclared_write(access: ServerAccess, before: _Snapshot, server_state: ServerState) -> str | None:
    """The first entry of ``server_state`` changed since ``before`` that ``access`` does not declare, or ``None``."""
    for key in _changed(before[0], server_state.statistics):
        if not access.may_write(key):
            return f"server statistic '{key}'"
    declared: dict[str, bool] = {}  # clients share their entries' names: match each name once
    for cid in {**before[1], **server_state.per_client}:
        for name in _changed(before[1].get(cid, {}), server_state.per_client.get(cid, {})):
            if name not in declared:
                declared[name] = access.may_write_per_client(name)
            if not declared[name]:
                return f"per-client payload entry '{name}' of client '{cid}'"
    return None


def run_server_hook(hooks: CallbackHooks, hook: str, round_idx: int, server_state: ServerState, **kwargs: Any) -> None:
    """Call a server-side ``hook`` callback by callback, checking the server state after each.

    Raises:
        ServerStepError: naming the round and the callback when its hook raises (chained to its error), leaves a
            non-finite server state (:func:`check_server_state`), or writes an entry of the server state that its
            :class:`~fedhet.core.ServerAccess` does not declare.

    """
    for callback, run in hooks.each(hook, round_idx=round_idx, server_state=server_state, **kwargs):
        name = f"callback '{type(callback).__qualname__}' ({hook})"
        before = _snapshot(server_state)
        try:
            run()
        except Exception as err:
            raise ServerStepError(f"round {round_idx}: {name} raised {type(err).__name__}: {err}") from err
        check_server_state(server_state, round_idx, name)
        undeclared = _undeclared_write(server_access(callback), before, server_state)
        if undeclared is not None:
            raise ServerStepError(
                f"round {round_idx}: {name} wrote {undeclared}, which its server_access does not declare"
            )
