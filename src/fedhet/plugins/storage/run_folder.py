"""Run version folders: each run keeps its config, logs, checkpoints and spilled client states in ``version_N/``.

As Lightning's loggers do, every command that runs (``fit`` from scratch, ``validate``, ``test``) claims the next free
``<root>/version_N`` folder, so no run overwrites another's files; a resumed ``fit`` goes on in the version folder of
the checkpoint it resumes, and ``export`` writes beside the run it exports. ``ckpt_path="last"`` means the latest
version's ``checkpoints/last.ckpt``. A command holds its version folder under a lock for its whole life
(:meth:`RunFolder.hold`): a second command on a held folder is refused in one line naming the holder. Logs are
replaced atomically (:class:`RunCSVLogger`), so a killed command never leaves less on disk than there was before it.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from fedhet.plugins.storage.client_store import remove_dead_spills
from fedhet.plugins.storage.files import atomic_write, try_lock
from fedhet.plugins.storage.versions import VERSION_FOLDER, latest_checkpoint, versions

log = logging.getLogger(__name__)


#: in a version folder: the lock its command holds, and who that command is
LOCK_NAME, HOLDER_NAME = ".fedhet.lock", ".fedhet.holder"


class RunFolderHeldError(RuntimeError):
    """A command asked for a version folder that another command holds."""


def version_of(path: str | Path, root: str | Path) -> int | None:
    """The version whose folder holds the checkpoint ``path`` (``<root>/version_N/checkpoints/*.ckpt``), or ``None``."""
    path, root = Path(path).resolve(), Path(root).resolve()
    folder = path.parent.parent
    match = VERSION_FOLDER.fullmatch(folder.name)
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
        self._lock: FileLock | None = None

    def hold(self, version: int | None, command: str) -> int:
        """Lock the version folder for a command (``version``, or a new one claimed): held until :meth:`release`.

        The holder (command, process, machine, start) is recorded beside the lock; the spill folders that killed runs
        left in the folder are deleted (:func:`~fedhet.plugins.storage.client_store.remove_dead_spills`). Holding the
        folder already (a trainer's next command) keeps it. Only one process of a run (rank 0) holds it.

        Args:
            version: the version to hold; ``None`` claims the next free one (:func:`claim_version`).
            command: what holds it (``"fit"``, ``"test"``...), for a refused command's message.

        Returns:
            the version held.

        Raises:
            RunFolderHeldError: in one line naming the folder and its holder, when another command holds the folder.

        """
        if version is None:
            version = claim_version(self.root)
        folder = self.root / f"version_{version}"
        if self._lock is not None and self.version == version:
            return version
        folder.mkdir(parents=True, exist_ok=True)
        lock = try_lock(folder / LOCK_NAME)
        if lock is None:
            raise RunFolderHeldError(f"{folder} is in use by {_holder_of(folder)}; wait for it to end")
        self.release()
        self._lock = lock
        since = time.strftime("%Y-%m-%d %H:%M:%S")
        holder = f"fedhet {command} (pid {os.getpid()} on {socket.gethostname()}, since {since})"
        atomic_write(folder / HOLDER_NAME, lambda tmp: tmp.write_text(holder))
        remove_dead_spills(folder / "client_state")
        return version

    def release(self) -> None:
        """Release the version folder this process holds, if any (the end of a command)."""
        if self._lock is None:
            return
        (Path(self._lock.lock_file).parent / HOLDER_NAME).unlink(missing_ok=True)
        self._lock.release()
        self._lock = None

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
        """Write a resolved CLI config as ``config.yaml`` into the version folder, atomically."""
        text = yaml.safe_dump(config, sort_keys=False)
        atomic_write(self.path / "config.yaml", lambda tmp: tmp.write_text(text))

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


def _holder_of(folder: Path) -> str:
    """Who holds ``folder``'s lock, as its holder recorded it."""
    try:
        return (folder / HOLDER_NAME).read_text().strip().splitlines()[0][:200]
    except (OSError, IndexError, UnicodeDecodeError):
        return "another fedhet command"


class _RunLogWriter(ExperimentWriter):
    """Lightning's CSV experiment writer for a version folder the run holds: what the folder holds is never deleted.

    Its first save replaces ``metrics.csv`` atomically with the rows it held and the new ones (a new row's values
    replace those of the row of its step: a resumed run writes its checkpoint's rounds again over the rows a killed run
    left); later saves append their rows (flushed and fsynced) when they bring new steps and no new column, else
    replace the file again. A row cut short by a kill while appending is dropped by the next replacement.
    ``hparams.yaml`` is replaced atomically.
    """

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir=log_dir)
        self._steps_written: set[Any] | None = None  # the steps of metrics.csv as this writer left it; None: not yet

    def _check_log_dir_exists(self) -> None:
        """Nothing to warn about or delete: the folder is the run's own."""

    def log_hparams(self, params: dict[str, Any]) -> None:
        """Record hyperparameters and replace ``hparams.yaml`` with them, atomically."""
        self.hparams.update(params)
        atomic_write(Path(self.log_dir) / self.NAME_HPARAMS_FILE, lambda tmp: save_hparams_to_yaml(tmp, self.hparams))

    def save(self) -> None:
        """Append the recorded rows to ``metrics.csv``, or replace it with its rows and them, atomically."""
        if not self.metrics:
            return
        steps = [row["step"] for row in self.metrics]
        if (
            self._steps_written is not None
            and len(set(steps)) == len(steps)
            and self._steps_written.isdisjoint(steps)
            and all(row.keys() <= set(self.metrics_keys) for row in self.metrics)
        ):
            with open(self.metrics_file_path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=self.metrics_keys).writerows(self.metrics)
                f.flush()
                os.fsync(f.fileno())
            self._steps_written.update(steps)
        else:
            self._replace()
        self.metrics = []

    def _replace(self) -> None:
        """Replace ``metrics.csv`` with its complete rows merged with the recorded ones, atomically."""
        path = Path(self.metrics_file_path)
        text = path.read_text() if path.is_file() else ""
        rows: dict[Any, dict[str, Any]] = {}
        for i, on_disk in enumerate(csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1]))):  # complete lines
            rows[_step_of(on_disk, i)] = dict(on_disk)
        for new in self.metrics:
            rows[new["step"]] = {**rows.get(new["step"], {}), **new}
        keys = sorted({key for row in rows.values() for key in row if key is not None})

        def write(tmp: Path) -> None:
            with tmp.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows.values())

        atomic_write(path, write)
        self.metrics_keys = keys
        self._steps_written = set(rows)


def _step_of(row: dict[str, Any], index: int) -> Any:
    """A ``metrics.csv`` row's step, or a key of its own when it has none."""
    try:
        return int(row["step"])
    except (KeyError, TypeError, ValueError):
        return ("row", index)


class RunCSVLogger(CSVLogger):
    """Lightning's CSV logger writing ``metrics.csv`` and ``hparams.yaml`` straight into a run's version folder.

    It deletes nothing there and replaces the files atomically (:class:`_RunLogWriter`): a resumed run's earlier rounds
    stay on disk while it runs, whenever it is killed.
    """

    def __init__(self, run: RunFolder) -> None:
        super().__init__(save_dir=run.root, name="")
        self.run = run

    @property
    def version(self) -> int:
        """The run's version (known once the trainer has launched its processes)."""
        if self.run.version is None:
            raise RuntimeError("RunCSVLogger: the run's version is not known yet")
        return self.run.version

    @property
    @rank_zero_experiment
    def experiment(self) -> _RunLogWriter:
        """The writer of the run's ``metrics.csv`` and ``hparams.yaml``."""
        if not isinstance(self._experiment, _RunLogWriter):
            self._experiment = _RunLogWriter(log_dir=self.log_dir)
        return self._experiment
