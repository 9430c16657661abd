"""The loader a federation's ``data`` argument names: a registered dataset, an import path, or a function.

A config names the user's own loader as ``"package.module:function"`` (or ``package.module.function``); the module is
imported and the function called to load the data, so a config is code (``docs/security.md``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def resolve_loader(data: object, datasets: Mapping[str, Callable[..., Any]], owner: str) -> Callable[..., Any] | None:
    """The function that loads ``data``, or ``None`` when ``data`` is the data itself (tensors, arrays).

    Args:
        data: a name in ``datasets``, an import path ``"package.module:function"``, or a callable.
        datasets: the loaders known by name.
        owner: who asks, for messages (e.g. ``"HybridFederation"``).

    Raises:
        ValueError: naming ``data``, when a string is neither a known name nor an import path, or cannot be imported.

    Example:
        >>> resolve_loader("math:sqrt", {}, "test")(4.0)
        2.0

    """
    if callable(data):
        return data
    if not isinstance(data, str):
        return None
    if data in datasets:
        return datasets[data]
    module_name, _, attribute = data.rpartition(":") if ":" in data else data.rpartition(".")
    if not module_name:
        raise ValueError(
            f"{owner}: `data` {data!r} is neither a known dataset {sorted(datasets)} nor 'package.module:function'"
        )
    try:
        loader = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{owner}: `data` {data!r} could not be imported: {error}") from error
    if not callable(loader):
        raise ValueError(f"{owner}: `data` {data!r} names {type(loader).__name__}, not a function")
    return loader  # type: ignore[no-any-return]
