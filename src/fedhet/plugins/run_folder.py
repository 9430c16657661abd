"""Run version folders: each run keeps its config, logs, checkpoints and spilled client states in ``version_N/``.

As Lightning's loggers do, every command that runs (``fit`` from scratch, ``validate``, ``test``) claims the next free
``<root>/version_N`` folder, so no run overwrites another's files; a resumed ``fit`` goes on in the version folder of
the checkpoint it resumes. ``ckpt_path="last"`` means the latest version's ``checkpoints/last.ckpt``.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch.loggers import CSVLogger

log = logging.getLogger(__name__)

_VERSION = re.compile(r"version_(\d+)")


def versions(root: str | Path) -> list[int]:
    """The version numbers of the ``version_N`` folders under ``root``, in increasing order."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = (_VERSION.fullmatch(p.name) for p in root.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m is not None)


def latest_checkpoint(root: str | Path) -> Path | None:
    """``checkpoints/last.ckpt`` of the latest version under ``root`` that has one (``None``: no version has)."""
    for version in reversed(versions(root)):
        path = Path(root) / f"version_{version}" / "checkpoints" / "last.ckpt"
        if path.is_file():
            return path
    return None


def version_of(path: str | Path, root: str | Path) -> int | None:
    """The version whose folder holds the checkpoint ``path`` (``<root>/version_N/checkpoints/*.ckpt``), or ``None``."""
    path, root = Path(path).resolve(), Path(root).resolve()
    folder = path.parent.parent
    match = _VERSION.fullmatch(folder.name)
    if match is None or path.parent.name != "checkpoints" or folder.parent != root:
        return None
    return int(match.group(1))


def config_root(config: str | Path) -> Path:
    """The run folder (``trainer.default_root_dir``) a ``fedhet`` YAML config writes to (``fedhet_runs`` by default)."""
    path = Path(config)
    if not path.is_file():
        raise FileNotFoundError(f"config {str(path)!r} does not exist")
    trainer = (yaml.safe_load(path.read_text()) or {}).get("trainer") or {}
    return Path(trainer.get("default_root_dir", "fedhet_runs"))


def claim_version(root: str | Path) -> int:
    """Create and return the next free ``<root>/version_N`` folder; concurrent claims never get the same ``N``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    version = (versions(root) or [-1])[-1] + 1
    while True:
        try:
            (root / f"version_{version}").mkdir()
            return version
        except FileExistsError:  # another run claimed it first
            version += 1


class RunFolder:
    """The version folder of one run, ``<root>/version_N``.

    It holds ``config.yaml``, ``metrics.csv``, ``checkpoints/``, ``client_state/`` and ``plots/``. The version is
    unknown until :meth:`bind` is called (the trainer binds it once its processes are launched, rank 0 claiming the
    folder and broadcasting its number); the paths raise before that.

    Args:
        root: the folder that holds the versions (the trainer's ``default_root_dir``).

    Example:
        >>> import tempfile
        >>> run = RunFolder(tempfile.mkdtemp())
        >>> run.bind(claim_version(run.root))
        >>> run.path.name, run.checkpoints.relative_to(run.root).as_posix()
        ('version_0', 'version_0/checkpoints')

    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.version: int | None = None
        self.name = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        """This run's own name (time and a random suffix): its spilled client states go in a folder named after it."""

    def bind(self, version: int) -> None:
        """Fix the run's version (its folder is created if missing)."""
        self.version = version
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        """``<root>/version_N``."""
        if self.version is None:
            raise RuntimeError("RunFolder: the run's version is not known before its processes are launched")
        return self.root / f"version_{self.version}"

    @property
    def checkpoints(self) -> Path:
        """Where ``last.ckpt`` and the checkpoints kept by ``ModelCheckpoint`` go."""
        return self.path / "checkpoints"

    @property
    def client_state(self) -> Path:
        """Where client states past ``client_state_budget_mb`` spill."""
        return self.path / "client_state"

    @property
    def plots(self) -> Path:
        """Where the dashboard's figures are written as PNG files."""
        return self.path / "plots"

    def spill_dir(self, rank: int) -> Path:
        """Process ``rank``'s own folder for spilled client states: ``client_state/<name>-rank<rank>``."""
        return self.client_state / f"{self.name}-rank{rank}"

    def save_config(self, config: dict[str, Any]) -> None:
        """Write a resolved CLI config as ``config.yaml`` into the version folder."""
        (self.path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def resolve_checkpoint(self, ckpt_path: str | Path | None, required: bool) -> Path | None:
        """The checkpoint file a command names: a path, ``"last"`` (:func:`latest_checkpoint` of the root) or ``None``.

        Raises:
            ValueError: when ``required`` and ``ckpt_path`` is ``None``.
            FileNotFoundError: when ``required`` and ``"last"`` finds no checkpoint (not required: a warning, and
                ``None`` to start from scratch).

        """
        if ckpt_path is None:
            if required:
                raise ValueError(
                    "no trained federation to evaluate: pass ckpt_path (a file or 'last') or call fit first"
                )
            return None
        if ckpt_path != "last":
            return Path(ckpt_path)
        path = latest_checkpoint(self.root)
        if path is None:
            message = f"ckpt_path='last' but no version folder of {str(self.root)!r} holds a checkpoint"
            if required:
                raise FileNotFoundError(f"{message}: nothing was trained yet with this default_root_dir")
            log.warning("%s: starting from scratch", message)
        return path


class RunCSVLogger(CSVLogger):
    """Lightning's CSV logger writing ``metrics.csv`` and ``hparams.yaml`` straight into a run's version folder."""

    def __init__(self, run: RunFolder) -> None:
        super().__init__(save_dir=run.root, name="")
        self.run = run

    @property
    def version(self) -> int:
        """The run's version (known once the trainer has launched its processes)."""
        if self.run.version is None:
            raise RuntimeError("RunCSVLogger: the run's version is not known yet")
        return self.run.version
