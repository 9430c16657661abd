"""Safe file operations of the engine: atomic writes, locks, and what untrusted files hold kept in bounds."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from filelock import FileLock, Timeout


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """Fill ``path`` atomically: ``write`` fills a temporary file in the same folder, which is fsynced, then renamed.

    A reader sees the previous file or the new one, never a partial one; a failed write (full disk, read-only folder,
    a process killed while writing) leaves ``path`` as it was and removes its temporary file, except after a kill,
    whose temporary file is named ``.<name>.*.tmp``.

    Args:
        path: the file to write.
        write: writes the new content to the path it is given (the temporary file).

    Raises:
        OSError: when the folder cannot be written; ``path`` is unchanged.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "notes.txt"
        >>> atomic_write(path, lambda tmp: tmp.write_text("kept"))
        >>> path.read_text()
        'kept'

    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` ``obj`` to ``path`` atomically (:func:`atomic_write`)."""
    import torch  # here, not at the top: a suite's parent process writes files without torch

    def write(tmp: Path) -> None:
        with tmp.open("wb") as f:
            torch.save(obj, f)

    atomic_write(path, write)


def file_identity(path: Path | None) -> tuple[int, int, int] | None:
    """What changes when ``path`` is rewritten (atomically or in place): its inode, size and modification time."""
    if path is None or not path.is_file():
        return None
    stat = path.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def try_lock(lock_file: str | Path) -> FileLock | None:
    """An exclusive lock on ``lock_file`` (``flock``, created if missing), or ``None`` when another holder has it.

    The lock is held until released or until its process ends, however it ends (a killed process holds nothing).
    """
    lock = FileLock(lock_file, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return None
    return lock


def hashed_name(key: str) -> str:
    """A SHA-256 of ``key``: a file name, valid and 64 characters long, for any string (ids from outside included)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


_CONTAINERS = (dict, list, tuple, set, frozenset)


def _entries(container: Any) -> list[Any]:
    """A container's entries: a dict's keys and values, a list's, tuple's or set's items."""
    return [*container.keys(), *container.values()] if isinstance(container, dict) else list(container)


def check_structure(value: Any, source: str, max_depth: int = 64, max_items: int = 10**8) -> None:
    """Refuse a loaded file's content nested deeper than ``max_depth``, larger than ``max_items`` entries, or cyclic.

    Run it before anything walks the content recursively. A crafted pickle nests containers without recursing, refers
    to one container from many places (which a walk visits as many times: ``max_items`` bounds the entries such a walk
    visits) or from inside itself. This check recurses nowhere and visits each container once. Tensors and scalars
    are leaves; dict keys and values, list, tuple and set items are entries.

    Raises:
        ValueError: naming ``source`` when the content is nested too deep, too large to walk, or holds itself.

    Example:
        >>> check_structure({"a": [1, (2, 3)]}, "x.ckpt")
        >>> check_structure([[[[1]]]], "x.ckpt", max_depth=3)
        Traceback (most recent call last):
        ...
        ValueError: x.ckpt: containers nested deeper than 3 levels; not a file this program wrote

    """
    done: dict[int, tuple[int, int]] = {}  # a checked container's id: (its height, the entries a walk of it visits)
    open_: dict[int, tuple[int, list[Any]]] = {}  # those being checked (the path to the stack's top): entries, children
    stack = [value] if isinstance(value, _CONTAINERS) else []
    while stack:
        item = stack[-1]
        if id(item) in done:
            stack.pop()
        elif id(item) not in open_:
            entries = _entries(item)
            children = [entry for entry in entries if isinstance(entry, _CONTAINERS)]
            open_[id(item)] = (len(entries), children)
            if any(id(child) in open_ for child in children):
                raise ValueError(f"{source}: a container holds itself; not a file this program wrote")
            stack.extend(child for child in children if id(child) not in done)
        else:
            stack.pop()
            num_entries, children = open_.pop(id(item))
            height = 1 + max((done[id(child)][0] for child in children), default=0)
            size = num_entries + sum(done[id(child)][1] for child in children)
            if height > max_depth:
                raise ValueError(
                    f"{source}: containers nested deeper than {max_depth} levels; not a file this program wrote"
                )
            if size > max_items:
                raise ValueError(f"{source}: more than {max_items} entries to walk; not a file this program wrote")
            done[id(item)] = (height, size)


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
    return root / cast(str, value)  # a str: anything else was refused above
