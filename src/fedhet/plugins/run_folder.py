"""Run version folders: each run keeps its config, logs, checkpoints and spilled client states in ``version_N/``.

As Lightning's loggers do, every command that runs (``fit`` from scratch, ``validate``, ``test``) claims the next free
``<root>/version_N`` folder, so no run overwrites another's files; a resumed ``fit`` goes on in the version folder of
the checkpoint it resumes. ``ckpt_path="last"`` means the latest version's ``checkpoints/last.ckpt``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from lightning.pytorch.loggers import CSVLogger

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
