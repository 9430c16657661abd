"""The callbacks' part of a federation checkpoint: which callbacks have a state, under which key, saved and restored."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from lightning.pytorch import Callback


def stateful(callbacks: Iterable[Any]) -> list[Any]:
    """The callbacks with a state to checkpoint: those defining ``state_dict`` (Lightning's empty default excluded)."""
    return [cb for cb in callbacks if getattr(type(cb), "state_dict", Callback.state_dict) is not Callback.state_dict]


def callback_keys(callbacks: Iterable[Any]) -> list[str]:
    """One distinct checkpoint key per callback: its ``state_key`` (or class name), ``#n`` added to the n-th repeat.

    Two stateful callbacks of one class would otherwise share a key and, on resume, both receive one's state.

    Example:
        >>> class Counter: ...
        >>> callback_keys([Counter(), Counter(), object()])
        ['Counter', 'Counter#1', 'object']

    """
    seen: Counter[str] = Counter()
    keys = []
    for callback in callbacks:
        base = str(getattr(callback, "state_key", type(callback).__qualname__))
        keys.append(base if not seen[base] else f"{base}#{seen[base]}")
        seen[base] += 1
    return keys


def callback_states(callbacks: Iterable[Any]) -> dict[str, Any]:
    """The ``state_dict()`` of each :func:`stateful` callback, by its :func:`callback_keys` key."""
    with_state = stateful(callbacks)
    return {key: cb.state_dict() for key, cb in zip(callback_keys(with_state), with_state, strict=True)}


def load_callback_states(callbacks: Iterable[Any], states: Mapping[str, Any]) -> None:
    """Give each :func:`stateful` callback the state saved under its key by :func:`callback_states` (if any)."""
    with_state = stateful(callbacks)
    for key, cb in zip(callback_keys(with_state), with_state, strict=True):
        if key in states and hasattr(cb, "load_state_dict"):
            cb.load_state_dict(states[key])
