"""Atomic, self-describing federation checkpoints that load with ``weights_only=True``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedhet.plugins.files import atomic_torch_save, path_under

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
    atomic_torch_save({"format": FORMAT, "version": VERSION, **state}, path)


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


def resumed_logger_version(state: dict[str, Any], logs_dir: str | Path, source: str | Path) -> int | str | None:
    """The CSV logger version a resumed run writes to, refused unless it names a folder inside ``logs_dir``.

    A checkpoint is untrusted input: a version such as ``"../../elsewhere"`` would make the logger write (and
    overwrite) ``metrics.csv`` and ``hparams.yaml`` outside the run.

    Raises:
        ValueError: naming ``source`` and the field ``logger_versions`` when the version is not an ``int`` or a
            relative folder inside ``logs_dir``.

    """
    versions = state.get("logger_versions") or []
    if not isinstance(versions, list):
        raise ValueError(f"checkpoint {str(source)!r}: field 'logger_versions' must be a list, got {versions!r}")
    version = versions[0] if versions else None
    if version is None or (isinstance(version, int) and not isinstance(version, bool) and version >= 0):
        return version
    path_under(logs_dir, version, "logger_versions", f"checkpoint {str(source)!r}")
    return version
