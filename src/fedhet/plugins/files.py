"""Safe file operations of the engine: atomic writes, and paths read from untrusted files kept inside their folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` ``obj`` to ``path`` atomically: a temporary file in the same folder, flushed, fsynced, renamed.

    A reader sees the previous file or the new one, never a partial one; a failed write (full disk, read-only folder,
    a process killed while writing) leaves ``path`` as it was and removes its temporary file, except after a kill,
    whose temporary file is named ``.<name>.*.tmp``.

    Raises:
        OSError: when the folder cannot be written; ``path`` is unchanged.

    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def path_under(root: str | Path, value: Any, field: str, source: str) -> Path:
    """``root / value`` for a ``value`` read from a file, refused unless it names a folder strictly inside ``root``.

    Args:
        root: the folder the path must stay in.
        value: a relative path taken from ``source`` (e.g. a logger version).
        field: the field of ``source`` that held ``value``, for the error.
        source: what ``value`` was read from (e.g. a checkpoint's path), for the error.

    Raises:
        ValueError: naming ``source`` and ``field`` when ``value`` is not a plain relative path that stays in
            ``root`` (absolute, with ``..``, a link out of it, empty, or not a string).

    Example:
        >>> path_under("runs/logs", "version_3", "logger_versions", "last.ckpt").as_posix()
        'runs/logs/version_3'
        >>> path_under("runs/logs", "../../etc", "logger_versions", "last.ckpt")
        Traceback (most recent call last):
        ...
        ValueError: last.ckpt: field 'logger_versions' holds '../../etc', which is not a folder inside 'runs/logs'

    """
    root = Path(root)
    inside = False
    if isinstance(value, str) and value and "\x00" not in value and not Path(value).is_absolute():
        resolved, base = (root / value).resolve(), root.resolve()
        inside = ".." not in Path(value).parts and resolved != base and resolved.is_relative_to(base)
    if not inside:
        raise ValueError(f"{source}: field {field!r} holds {value!r}, which is not a folder inside {root.as_posix()!r}")
    return root / value
