"""Atomic, self-describing federation checkpoints that load with ``weights_only=True``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

FORMAT = "fedhet-federation-checkpoint"
VERSION = 1


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: a temporary file in the same folder, flushed, then renamed.

    A process killed while writing leaves the previous checkpoint intact; its temporary file is removed by the next
    write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for orphan in path.parent.glob(f".{path.name}.*.tmp"):  # left by a process killed while writing
        orphan.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, "version": VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint`, refusing truncated or foreign files with a clear error."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"checkpoint {str(path)!r} could not be read (truncated or not a torch file): {err}") from err
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"checkpoint {str(path)!r} is not a fedhet federation checkpoint")
    if state.get("version") != VERSION:
        raise ValueError(f"checkpoint {str(path)!r} has format version {state.get('version')}, expected {VERSION}")
    return state
