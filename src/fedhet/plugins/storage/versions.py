"""A run root's ``version_N`` folders and latest checkpoint, found without Lightning (a suite's parent reads them)."""

from __future__ import annotations

import re
from pathlib import Path

VERSION_FOLDER = re.compile(r"version_(\d+)")
"""A version folder's name; its group is the version number."""


def versions(root: str | Path) -> list[int]:
    """The version numbers of the ``version_N`` folders under ``root``, in increasing order."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = (VERSION_FOLDER.fullmatch(p.name) for p in root.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m is not None)


def latest_checkpoint(root: str | Path) -> Path | None:
    """``checkpoints/last.ckpt`` of the latest version under ``root`` that has one (``None``: no version has)."""
    for version in reversed(versions(root)):
        path = Path(root) / f"version_{version}" / "checkpoints" / "last.ckpt"
        if path.is_file():
            return path
    return None
