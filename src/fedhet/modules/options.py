"""Checks of a module's constructor options: each refusal one line naming the module and the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_options(
    owner: str,
    choices: Mapping[str, tuple[Any, tuple[Any, ...]]] = {},  # noqa: B006 - read only
    non_negative: Mapping[str, float] = {},  # noqa: B006 - read only
    positive: Mapping[str, float | None] = {},  # noqa: B006 - read only
) -> None:
    """Refuse the first option out of its range.

    Args:
        owner: the module's name, for the message.
        choices: ``field -> (value, allowed values)``.
        non_negative: ``field -> value`` that must be ``>= 0``.
        positive: ``field -> value`` that must be ``> 0`` unless ``None``.

    Raises:
        ValueError: ``"<owner>: field '<field>' must be ..."``.

    """
    for name, (value, allowed) in choices.items():
        if value not in allowed:
            raise ValueError(f"{owner}: field '{name}' must be one of {allowed}, got {value!r}")
    for field, amount in non_negative.items():
        if amount < 0:
            raise ValueError(f"{owner}: field '{field}' must be >= 0, got {amount}")
    for field, size in positive.items():
        if size is not None and size <= 0:
            raise ValueError(f"{owner}: field '{field}' must be positive, got {size}")
