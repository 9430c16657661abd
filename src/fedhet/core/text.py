"""Quoting a value that came from outside the process (a node's reply, a file) in a message, within a bounded length."""

from __future__ import annotations

#: The most characters of an untrusted value a message quotes.
QUOTE_CHARS = 80


def quoted(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr`` of ``value`` as text, cut to ``limit`` characters (saying how long it was) when longer.

    A refusal or a log line quotes what it refuses; a crafted value (a 20,000,000-character client id, a tensor
    name of a megabyte) must not make that line as long.

    Example:
        >>> quoted("site_a")
        "'site_a'"
        >>> quoted("x" * 1000, limit=5)
        "'xxxxx'... (1000 characters)"

    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"
