"""The run record: what a run's folders hold about it, read and written here and nowhere else.

A run's ``default_root_dir`` holds one ``version_N`` folder per command (:mod:`~fedhet.plugins.storage.run_folder`), and
each version folder:

- ``config.yaml``: the resolved config (:meth:`~fedhet.plugins.storage.run_folder.RunFolder.save_config`);
- ``metrics.csv``: one row per round or evaluation (:class:`~fedhet.plugins.storage.run_folder.RunCSVLogger`),
  read back by :func:`read_metrics`;
- ``checkpoints/last.ckpt``: the federation (:mod:`~fedhet.plugins.storage.checkpoint`);
- ``record.json`` (:class:`RunRecord`, :func:`add_record`, :func:`read_records`): one record per command that ran
  in the folder (a fit, a resumed fit, a test by the same trainer), in order: the command, fedhet's version and
  commit, the environment fingerprint (:func:`~fedhet.core.provenance.environment`), the torch threads the command
  ran with, its seed, rounds and data digest, its CPU seconds split into start-up, rounds and evaluation
  (:class:`CpuSeconds`), and the sha256 of every fedhet and user module it imported.

A suite run (:mod:`fedhet.experiments.runs`) keeps its outcome in ``result.json`` beside the version folders
(:func:`write_result`, :func:`read_result`), made from these files.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from fedhet.core.provenance import environment, file_sha256, files_read, module_digests, source_tree, user_packages
from fedhet.plugins.storage.files import atomic_write
from fedhet.plugins.storage.versions import versions

log = logging.getLogger(__name__)

RECORD_FILE = "record.json"
METRICS_FILE = "metrics.csv"
CONFIG_FILE = "config.yaml"
RESULT_FILE = "result.json"

#: config keys that say where a run writes, not what it computes: left out of its config's digest
_LOCATION_KEYS = ("default_root_dir", "ckpt_path")


@dataclass(frozen=True)
class CpuSeconds:
    """A command's CPU seconds (user + system, every thread of its processes), split by what they were spent on.

    Attributes:
        startup: from the process's start (or the end of the previous command in the same process) to its first round
            or evaluation: interpreter, imports, config parsing, data loading, model building, checkpoint reading.
        rounds: the rounds' training, aggregation and server steps (their validation evaluations not counted).
        evaluation: the evaluations (validation during rounds, the test command's evaluation).

    """

    startup: float = 0.0
    rounds: float = 0.0
    evaluation: float = 0.0

    def __add__(self, other: CpuSeconds) -> CpuSeconds:
        return CpuSeconds(self.startup + other.startup, self.rounds + other.rounds, self.evaluation + other.evaluation)


class CpuMeter:
    """Measures one command's :class:`CpuSeconds` from ``time.process_time`` (this process's threads)."""

    _previous_end: ClassVar[float] = 0.0  # when the previous command of this process finished

    def __init__(self) -> None:
        self._began = CpuMeter._previous_end
        self._work: float | None = None
        self.rounds = 0.0
        self.evaluation = 0.0

    def start_work(self) -> None:
        """Mark the end of start-up (the first call counts)."""
        if self._work is None:
            self._work = time.process_time()

    @staticmethod
    def now() -> float:
        """This process's CPU seconds so far."""
        return time.process_time()

    def finish(self) -> CpuSeconds:
        """The command's seconds; the next command of this process counts its start-up from here."""
        end = time.process_time()
        CpuMeter._previous_end = end
        return CpuSeconds(startup=(end if self._work is None else self._work) - self._began, rounds=self.rounds,
                          evaluation=self.evaluation)  # fmt: skip


@dataclass(frozen=True)
class RunRecord:
    """What one command (``fit``, ``validate``, ``test``) of a run records in its version folder's ``record.json``.

    Attributes:
        command: ``"fit"``, ``"validate"`` or ``"test"``.
        fedhet_version: ``fedhet.__version__``.
        commit: the commit of the fedhet source tree it ran (:func:`~fedhet.core.provenance.source_tree`).
        dirty: whether fedhet's files had uncommitted changes.
        environment: the environment fingerprint (:func:`~fedhet.core.provenance.environment`).
        threads: ``torch.get_num_threads()`` when its rounds (or evaluation) started.
        seed: the trainer's seed.
        rounds_done: the rounds the federation had trained at its end.
        rounds_trained: the rounds this command trained (a resumed fit: those after its checkpoint).
        cpu: its CPU seconds, summed over its processes.
        data_sha256: the sha256 of its clients' data (their tensors' digests; ``None`` when a client exposes none).
        config_sha256: the sha256 of its resolved config without the keys that say where it writes (the same
            wherever the checkout or run folder lives); ``None`` without a config (a run made through the API).
        sources: ``module -> sha256`` of every fedhet module and user module (a package a config names by
            ``class_path``) the process had imported at its end (:func:`~fedhet.core.provenance.module_digests`).
        data_files: ``file -> sha256`` of the data files the process's datasets had read by its end (bundled
            files, CSV files, MNIST...; :func:`~fedhet.core.provenance.files_read`).

    """

    command: str
    fedhet_version: str
    commit: str
    dirty: bool
    environment: dict[str, str]
    threads: int
    seed: int
    rounds_done: int
    rounds_trained: int
    cpu: CpuSeconds
    data_sha256: str | None = None
    config_sha256: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    data_files: dict[str, str] = field(default_factory=dict)

    FORMAT: ClassVar[int] = 1

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (``format`` added)."""
        return {"format": self.FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any, source: str) -> RunRecord:
        """Read a record back, refusing one with a missing or mistyped field in one line naming ``source``."""
        if not isinstance(data, dict) or data.get("format") != cls.FORMAT:
            raise ValueError(f"{source}: not a fedhet run record of format {cls.FORMAT}")
        try:
            cpu = CpuSeconds(**{k: float(v) for k, v in data["cpu"].items()})
            record = cls(**{**{k: v for k, v in data.items() if k != "format"}, "cpu": cpu})
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{source}: field missing or of the wrong type in the run record ({err})") from err
        for name, kind in (("commit", str), ("threads", int), ("environment", dict), ("sources", dict)):
            if not isinstance(getattr(record, name), kind):
                raise ValueError(f"{source}: field '{name}' must be a {kind.__name__}")
        return record


def config_sha256(config: Mapping[str, Any] | None) -> str | None:
    """The sha256 of a resolved config with its run-location keys (``trainer.default_root_dir``, ``ckpt_path``) out."""
    if config is None:
        return None

    def strip(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {str(k): strip(v) for k, v in node.items() if k not in _LOCATION_KEYS}
        if isinstance(node, (list, tuple)):
            return [strip(v) for v in node]
        return node

    return hashlib.sha256(json.dumps(strip(config), sort_keys=True, default=str).encode()).hexdigest()


def class_paths(node: Any) -> list[str]:
    """Every ``class_path`` value in a (resolved) config."""
    if isinstance(node, Mapping):
        found = [str(node["class_path"])] if isinstance(node.get("class_path"), str) else []
        return found + [p for v in node.values() for p in class_paths(v)]
    if isinstance(node, (list, tuple)):
        return [p for v in node for p in class_paths(v)]
    return []


def make_record(
    command: str,
    *,
    threads: int,
    seed: int,
    rounds_done: int,
    rounds_trained: int,
    cpu: CpuSeconds,
    fingerprint: Mapping[str, Any] | None,
    config: Mapping[str, Any] | None,
    classes: tuple[type, ...] = (),
) -> RunRecord:
    """The record of a command that just ended in this process.

    Args:
        command: ``fit``, ``validate`` or ``test``.
        threads: torch's threads when its work started.
        seed: the trainer's seed.
        rounds_done: the federation's rounds at the end.
        rounds_trained: the rounds this command trained.
        cpu: its CPU seconds.
        fingerprint: the run's fingerprint (:func:`~fedhet.plugins.storage.fingerprint.run_fingerprint`), whose clients'
            data digests give ``data_sha256``.
        config: the resolved CLI config, if any.
        classes: the run's module, datamodule and callback classes: their packages count as user code with the
            config's ``class_path`` values.

    """
    tree = source_tree()
    clients = (fingerprint or {}).get("clients")
    data = None
    if isinstance(clients, Mapping) and all(c.get("data") is not None for c in clients.values()):
        data = hashlib.sha256(json.dumps(clients, sort_keys=True).encode()).hexdigest()
    named = class_paths(config) + [f"{c.__module__}.{c.__qualname__}" for c in classes]
    return RunRecord(
        command=command,
        fedhet_version=tree.version,
        commit=tree.commit,
        dirty=tree.dirty,
        environment=environment(),
        threads=threads,
        seed=seed,
        rounds_done=rounds_done,
        rounds_trained=rounds_trained,
        cpu=cpu,
        data_sha256=data,
        config_sha256=config_sha256(config),
        sources=module_digests(user_packages(named)),
        data_files=files_read(),
    )


def _write_json(path: Path, payload: Any) -> None:
    text = json.dumps(payload, indent=1, sort_keys=True)
    atomic_write(path, lambda tmp: tmp.write_text(text))


def add_record(folder: str | Path, record: RunRecord) -> Path:
    """Append ``record`` to ``<folder>/record.json`` (the file replaced atomically); returns the path.

    A file that cannot be read back (:func:`read_records` refuses it) is replaced, with a warning, by this record alone.
    """
    path = Path(folder) / RECORD_FILE
    try:
        earlier = read_records(folder)
    except ValueError as err:
        log.warning("%s; it is replaced by the record of this command", err)
        earlier = []
    _write_json(path, [r.to_dict() for r in (*earlier, record)])
    return path


def read_records(folder: str | Path) -> list[RunRecord]:
    """A version folder's records, one per command that ran in it, oldest first (none: a fedhet before records).

    Raises:
        ValueError: in one line naming the file when it is not valid JSON, not a list of records, or a field is
            missing or mistyped.

    """
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        return []
    source = f"run record {str(path)!r}"
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{source} is not valid JSON: {err}".replace("\n", " ")) from err
    if not isinstance(data, list):
        raise ValueError(f"{source}: not a list of fedhet run records")
    return [RunRecord.from_dict(entry, source) for entry in data]


def last_record(folder: str | Path, command: str) -> RunRecord | None:
    """The latest record of ``command`` (``fit``, ``test``...) in a version folder, or ``None``."""
    return next((r for r in reversed(read_records(folder)) if r.command == command), None)


def read_metrics(folder: str | Path) -> list[dict[str, float]]:
    """The rows of a version folder's ``metrics.csv``, each with its non-empty cells as floats.

    Raises:
        FileNotFoundError: in one line naming the folder when it holds no ``metrics.csv`` (``trainer.logger: false``
            turns a run's CSV record off).

    """
    path = Path(folder) / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"run folder '{folder}' holds no {METRICS_FILE} (trainer.logger: false turns the run's CSV record off)"
        )
    with path.open(newline="") as handle:
        return [{k: float(v) for k, v in row.items() if v not in (None, "")} for row in csv.DictReader(handle)]


def resolved_config_sha256(folder: str | Path) -> str:
    """The sha256 of a version folder's ``config.yaml`` bytes."""
    return file_sha256(Path(folder) / CONFIG_FILE)


def resolved_config_text(folder: str | Path) -> str:
    """A version folder's resolved ``config.yaml``, as text."""
    return (Path(folder) / CONFIG_FILE).read_text()


def latest_version(root: str | Path) -> int | None:
    """The highest ``version_N`` under a run's root (``None``: none yet)."""
    found = versions(root)
    return found[-1] if found else None


def versions_since(root: str | Path, before: int | None, count: int) -> list[Path]:
    """The ``count`` latest version folders written under ``root`` after version ``before``, oldest first.

    Raises:
        RuntimeError: when fewer than ``count`` were written.

    """
    made = [v for v in versions(root) if before is None or v > before]
    if len(made) < count:
        raise RuntimeError(f"{count} version folders should have been written under '{root}', found {len(made)}")
    return [Path(root) / f"version_{v}" for v in made[-count:]]


def recorded_cpu(root: str | Path) -> float | None:
    """The CPU seconds every command recorded under a run's root (all its version folders, every part summed).

    ``None`` when the root holds no version folder, or one whose commands recorded nothing (a fedhet before records).
    """
    found = versions(root)
    records = [read_records(Path(root) / f"version_{v}") for v in found]
    if not found or not all(records):
        return None
    return math.fsum(r.cpu.startup + r.cpu.rounds + r.cpu.evaluation for kept in records for r in kept)


def write_result(folder: str | Path, result: Mapping[str, Any]) -> Path:
    """Write a suite run's ``result.json`` into its run folder, atomically; returns the path."""
    path = Path(folder) / RESULT_FILE
    _write_json(path, dict(result))
    return path


def read_result(folder: str | Path) -> dict[str, Any] | None:
    """A run folder's ``result.json``, or ``None`` when the run has not finished."""
    path = Path(folder) / RESULT_FILE
    return json.loads(path.read_text()) if path.is_file() else None
