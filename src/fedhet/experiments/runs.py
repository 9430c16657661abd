"""One run of a suite: ``fedhet fit`` then ``fedhet test`` in one warm child process, and its ``result.json``.

A run is one (federation, method, seed). Its folder ``<output>/runs/<federation>/<method>/seed<s>`` is the trainer's
``default_root_dir``: the fit writes ``version_N`` (``config.yaml``, ``metrics.csv``, ``checkpoints/last.ckpt``) and
the test, given ``--ckpt_path last``, the next version with the test metrics. ``result.json`` is written (atomically)
only when both finished, so a suite run again skips the runs that have one. A run that was stopped (its fit saves
``last.ckpt`` every round) resumes from its latest checkpoint in the same version folder, as ``fedhet fit
--ckpt_path`` resumes (the same result as a run never stopped); a checkpoint that cannot be read is set aside and the
run starts again in a new version folder. A run folder records the sha256 of its inputs (:func:`run_sha256`: its
config files, overrides, seed and tags); one left by other inputs (a config edited, a value tuned again) is moved
aside to ``<folder>.stale<k>``, so that neither its result nor its checkpoint is taken for the new run's. A run
is claimed by a lock beside its folder while it runs (:func:`execute`), so processes sharing a suite's output never
run one run twice at once. Both
commands run in one process (:mod:`~fedhet.experiments.fit_test`), each with its own log (``fit.log``, ``test.log``):
a new child of the warm run processes (:mod:`~fedhet.experiments.warm`), which imported torch, Lightning and fedhet
once for the whole suite, with the numbers of the same commands in a fresh process (:func:`run_command`).

The seed is the trainer's (``--trainer.seed``: model initialisation, client sampling, batches); the federation's own
data seed is left as its config gives it, so every seed and every method see the same clients and splits, and the
differences between methods on one seed are paired.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock, Timeout

from fedhet.core.provenance import digest_of, file_sha256, repo_label, user_code_digests
from fedhet.plugins.storage.run_record import (
    CpuSeconds,
    RunRecord,
    class_paths,
    last_record,
    latest_version,
    read_metrics,
    read_result,
    resolved_config_sha256,
    versions_since,
    write_result,
)

INPUTS_FILE = "inputs.sha256"
_log = logging.getLogger(__name__)


class RunDivergedError(RuntimeError):
    """A run's fit stopped because too many clients' uploads went non-finite (``fedhet fit`` exit status 3)."""


class RunHeldError(RuntimeError):
    """Another process is running the run (it holds the lock beside the run folder)."""


@dataclass(frozen=True)
class RunSpec:
    """What one run needs (picklable).

    Attributes:
        federation: the federation's name in the suite.
        method: the method's name in the suite.
        seed: the trainer's seed.
        configs: the ``-c`` configs, the method's first, then the federation's data config if any.
        overrides: ``dotted.key -> value`` given as ``--key=value`` after the configs.
        folder: the run folder (the trainer's ``default_root_dir``).
        extra_fit_args: more ``fedhet fit`` arguments (a tuning trial's pruning callback).
        test: whether ``fedhet test`` follows the fit (tuning trials score validation only and skip it).
        threads: the run's compute threads (``--trainer.processes.threads``, recorded in its ``config.yaml``; also
            ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` of its process), whatever the machine's cores.
        group: the W&B run group (``WANDB_RUN_GROUP``) of a fit that logs to W&B (``None``: inherited).
        tags: more entries of ``result.json`` (e.g. the tuning trial).

    """

    federation: str
    method: str
    seed: int
    configs: tuple[Path, ...]
    overrides: Mapping[str, Any]
    folder: Path
    extra_fit_args: tuple[str, ...] = ()
    test: bool = True
    threads: int = 1
    group: str | None = None
    tags: Mapping[str, Any] = field(default_factory=dict)


def _cli_value(value: Any) -> str:
    """A value as jsonargparse reads it on the command line (YAML/JSON flow style for lists and mappings)."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def command(spec: RunSpec, subcommand: str) -> list[str]:
    """The ``python -m fedhet <subcommand>`` command line of ``spec``, as one would run it alone."""
    return [sys.executable, "-m", "fedhet", *arguments(spec, subcommand)]


def arguments(spec: RunSpec, subcommand: str) -> list[str]:
    """The ``fedhet`` arguments of ``spec``'s ``subcommand`` (``fit`` or ``test``), the subcommand first."""
    args = [subcommand]
    for config in spec.configs:
        args += ["-c", str(config)]
    args += [
        f"--trainer.seed={spec.seed}",
        f"--trainer.default_root_dir={spec.folder}",
        "--trainer.reporting.progress_bar=false",
        "--trainer.reporting.accuracy_plot=false",  # the suite draws its own plots (about 0.1 CPU s a run)
        f"--trainer.processes.threads={spec.threads}",
    ]
    args += [f"--{key}={_cli_value(value)}" for key, value in spec.overrides.items()]
    if subcommand == "fit":
        args += list(spec.extra_fit_args)
    else:
        args += ["--ckpt_path", "last"]
    return args


def plan(spec: RunSpec) -> str:
    """The JSON plan of :mod:`~fedhet.experiments.fit_test` for ``spec``: its fit, and its test if ``spec.test``."""
    return json.dumps(
        {
            "fit": arguments(spec, "fit"),
            "test": arguments(spec, "test") if spec.test else None,
            "test_log": str(spec.folder / "test.log"),
        }
    )


def run_command(spec: RunSpec) -> list[str]:
    """The one command line that runs ``spec`` in a fresh process, as :func:`execute` runs it in a warm child."""
    return [sys.executable, "-m", "fedhet.experiments.fit_test", plan(spec)]


def _run(spec: RunSpec) -> float:
    """Run ``spec``'s fit and test, their output to ``fit.log`` and ``test.log``; return their CPU seconds.

    Both run in one new child of the warm run processes (:func:`fedhet.experiments.warm.call`), as
    :func:`run_command` would run them in a fresh process. The CPU seconds are user + system time of that child and
    its own children.

    Raises:
        RunDivergedError: when the fit diverged (exit status 3), with the message below.
        RuntimeError: naming the command that failed (``fedhet fit`` or ``fedhet test``), the run folder and the log.

    """
    from fedhet.experiments import fit_test, warm

    env = {} if spec.group is None else {"WANDB_RUN_GROUP": spec.group}
    fit_log, test_log = spec.folder / "fit.log", spec.folder / "test.log"
    test_log.unlink(missing_ok=True)  # written once the test starts: it names the failing command
    try:
        _, cpu = warm.call(fit_test.main, [plan(spec)], log=fit_log, threads=spec.threads, env=env)
    except warm.ChildExitError as ended:
        from fedhet.plugins.uploads.policies import DIVERGED_EXIT_STATUS

        subcommand, log = ("test", test_log) if test_log.is_file() else ("fit", fit_log)
        tail = log.read_text().strip().splitlines()[-3:] or [f"exit status {ended.status}"]
        message = f"fedhet {subcommand} failed in '{spec.folder}' ({' | '.join(tail)}); log: {log}"
        if subcommand == "fit" and ended.status == DIVERGED_EXIT_STATUS:
            raise RunDivergedError(message) from None
        raise RuntimeError(message) from None
    return cpu


def summarise(fit_rows: Sequence[Mapping[str, float]], test_rows: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """What a run's ``result.json`` keeps of its metrics.

    Returns:
        ``val``: per evaluated round, ``round`` and its ``val/...`` metrics; ``test``: every ``test/...`` and
        ``test_new/...`` metric (client ones included); ``rounds``; ``bytes_per_round`` (mean of ``comm/bytes_up``
        + ``comm/bytes_down``); ``time``: the total of each ``time/...`` metric over rounds.

    """
    val = [
        {"round": row.get("round", row.get("step", i)), **{k: v for k, v in row.items() if k.startswith("val/")}}
        for i, row in enumerate(fit_rows)
        if any(k.startswith("val/") for k in row)
    ]
    rounds = [row for row in fit_rows if "comm/bytes_up" in row or "comm/bytes_down" in row]
    traffic = [row.get("comm/bytes_up", 0.0) + row.get("comm/bytes_down", 0.0) for row in rounds]
    times: dict[str, float] = {}
    for row in fit_rows:
        for key, value in row.items():
            if key.startswith("time/"):
                times[key] = times.get(key, 0.0) + value
    test: dict[str, float] = {}
    for row in test_rows:
        test.update({k: v for k, v in row.items() if k.startswith(("test/", "test_new/"))})
    return {
        "val": val,
        "test": test,
        "rounds": len(rounds),
        "bytes_per_round": sum(traffic) / len(traffic) if traffic else 0.0,
        "time": times,
    }


def _yaml_names(node: Any) -> Iterator[str]:
    """The strings ending in ``.yaml`` or ``.yml`` among the values of a loaded YAML tree, in order."""
    if isinstance(node, Mapping):
        for value in node.values():
            yield from _yaml_names(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _yaml_names(value)
    elif isinstance(node, str) and node.endswith((".yaml", ".yml")):
        yield node


@functools.lru_cache(maxsize=256)
def _loaded_file(path: Path, stamp: tuple[int, int]) -> Any:
    """A YAML file's content, parsed once per version of it (``stamp``: its mtime and size); ``None`` if not YAML."""
    try:
        return yaml.safe_load(path.read_text())
    except (UnicodeDecodeError, yaml.YAMLError):
        return None


def _loaded(path: Path) -> Any:
    stat = path.stat()
    return _loaded_file(path.resolve(), (stat.st_mtime_ns, stat.st_size))


def _names_in(path: Path) -> tuple[str, ...]:
    return tuple(_yaml_names(_loaded(path)))


def named_configs(configs: Sequence[Path], values: Any = None) -> list[Path]:
    """The YAML files that ``configs`` and ``values`` name as values, and those these name in turn, each once.

    E.g. FedDaDiL's ``encoder_config``, the step-1 run whose checkpoint step 2 reads. A value names a file when it
    is a string ending in ``.yaml`` or ``.yml`` that is a file, relative to the working directory as ``fedhet fit``
    reads it; ``configs`` themselves are not listed. A file that is not valid YAML counts with its bytes alone (the
    fit that reads it refuses it). Each file is parsed once per process and version (a suite asks for the digests
    of the same few configs for every run).
    """
    seen = {Path(config).resolve() for config in configs}
    found: list[Path] = []

    def follow(names: Iterable[str]) -> None:
        for name in names:
            path = Path(name)
            if path.is_file() and path.resolve() not in seen:
                seen.add(path.resolve())
                found.append(path)
                follow(_names_in(path))

    follow(_yaml_names(values))
    for config in configs:
        follow(_names_in(Path(config)))
    return found


def inputs_sha256(configs: Sequence[Path], **inputs: Any) -> str:
    """The sha256 of the config files' bytes and ``inputs`` (JSON-like values, keys sorted; others by ``str``).

    The config files that these name in turn (:func:`named_configs`) count with their bytes too.
    """
    payload = {"configs": [file_sha256(Path(config)) for config in configs], **inputs}
    named = named_configs(configs, inputs)
    if named:  # only then: the digests of suites whose configs name no other file stay as they were
        payload["named_configs"] = [file_sha256(path) for path in named]
    user = user_code(configs, inputs)
    if user:  # likewise: only runs whose configs name user code by class_path
        payload["user_code"] = user
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def user_code(configs: Sequence[Path], values: Any = None) -> dict[str, str]:
    """``file -> sha256`` of the user packages that ``configs`` (and configs they name) and ``values`` name by class.

    See :func:`~fedhet.core.provenance.user_code_digests`: a package is looked for first in the working directory, as
    ``python -m fedhet fit`` imports it.
    """
    named: list[str] = class_paths(values)
    for path in [*map(Path, configs), *named_configs(configs, values)]:
        named += class_paths(_loaded(path))
    return user_code_digests(named, [Path.cwd()])


def run_sha256(spec: RunSpec) -> str:
    """The sha256 of what decides a run's outcome: its config files' bytes, its overrides, seed, tags and threads.

    The threads count only when not 1 (the runs of one thread keep the digests they had).
    """
    threads = {} if spec.threads == 1 else {"threads": spec.threads}
    return inputs_sha256(spec.configs, overrides=dict(spec.overrides), seed=spec.seed, tags=dict(spec.tags), **threads)


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def is_current(result: Mapping[str, Any], spec: RunSpec) -> bool:
    """Whether ``result`` (a ``result.json``) came from ``spec``'s inputs.

    A result written before fedhet recorded ``inputs_sha256`` is matched on its overrides only.
    """
    recorded = result.get("inputs_sha256")
    if recorded is not None:
        return bool(recorded == run_sha256(spec))
    return bool(_as_json(result.get("overrides")) == _as_json(dict(spec.overrides)))


def current_result(spec: RunSpec) -> dict[str, Any] | None:
    """``spec``'s ``result.json`` when its run finished with ``spec``'s inputs, else ``None``."""
    result = read_result(spec.folder)
    return result if result is not None and is_current(result, spec) else None


def _set_aside_if_stale(spec: RunSpec, digest: str) -> None:
    """Move ``spec.folder`` to ``<folder>.stale<k>`` when another run's inputs left it (see the module docstring)."""
    folder = spec.folder
    if not folder.is_dir():
        return
    marker, result = folder / INPUTS_FILE, read_result(folder)
    if marker.is_file():
        stale = marker.read_text().strip() != digest
    else:  # a folder from before the marker: a stopped run resumes, a finished one is matched on its overrides
        stale = result is not None and not is_current(result, spec)
    if not stale:
        return
    k = 1
    while folder.with_name(f"{folder.name}.stale{k}").exists():
        k += 1
    _log.warning("run folder '%s' was left by other inputs; moved to '%s.stale%d'", folder, folder.name, k)
    folder.rename(folder.with_name(f"{folder.name}.stale{k}"))


def resume_point(folder: Path) -> tuple[Path, int] | None:
    """The latest ``last.ckpt`` of a stopped run in ``folder`` and the rounds it holds (``None``: start afresh).

    A checkpoint that cannot be read (:func:`~fedhet.plugins.storage.checkpoint.load_checkpoint` refuses it) is renamed
    ``last.ckpt.unreadable`` with a warning, so that neither this run nor a later one resumes from it.
    """
    from fedhet.plugins.storage.versions import latest_checkpoint

    path = latest_checkpoint(folder)
    if path is None:
        return None
    from fedhet.plugins.storage.checkpoint import load_checkpoint  # torch: only when there is one to read

    try:
        done = load_checkpoint(path).round
    except (ValueError, KeyError, TypeError) as err:
        _log.warning("run folder '%s': not resuming from %s (%s); the run starts again", folder, path, err)
        path.rename(path.with_name(path.name + ".unreadable"))
        return resume_point(folder)
    return path, done


def execute(spec: RunSpec, wait: bool = False) -> dict[str, Any]:
    """Run ``spec`` (fit, then test unless ``spec.test`` is false, in one process), write ``result.json``, return it.

    A run is claimed by a lock beside its folder (``.seed<s>.lock``, ``flock``: released however its process ends)
    for as long as this call runs it, so processes that share a suite's output (two ``fedhet compare`` of one suite,
    on one machine or on machines whose shared file system has locks) never run one run at once. A run that finished
    with ``spec``'s inputs while this call waited for it is not run again: its ``result.json`` is returned.

    Args:
        spec: the run.
        wait: when another process holds the run, wait until it lets go (then return its result, or run it when
            that process ended without one); ``False``: raise :class:`RunHeldError` at once.

    Raises:
        RunHeldError: another process holds the run, and ``wait`` is false.
        RuntimeError: one line naming the command, the run folder and its log, when a command fails.

    """
    spec.folder.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(spec.folder.with_name(f".{spec.folder.name}.lock"), timeout=-1 if wait else 0)
    try:
        lock.acquire()
    except Timeout:
        raise RunHeldError(f"run folder '{spec.folder}' is being run by another process") from None
    try:
        finished = current_result(spec) if spec.test else None
        return finished if finished is not None else _execute(spec)
    finally:
        lock.release()


def _execute(spec: RunSpec) -> dict[str, Any]:
    """:func:`execute`'s run, with the run claimed."""
    digest = run_sha256(spec)
    _set_aside_if_stale(spec, digest)
    spec.folder.mkdir(parents=True, exist_ok=True)
    (spec.folder / INPUTS_FILE).write_text(digest + "\n")
    start = time.perf_counter()
    before = latest_version(spec.folder)
    resume = resume_point(spec.folder) if spec.test else None  # a tuning trial is never resumed: pruning reads rounds
    if resume is not None:
        spec = replace(spec, extra_fit_args=(*spec.extra_fit_args, "--ckpt_path", str(resume[0])))
    cpu = _run(spec)
    if resume is None:
        fit_dir, *tested = versions_since(spec.folder, before, 2 if spec.test else 1)
    else:  # the resumed fit writes on in its checkpoint's version folder
        fit_dir, tested = resume[0].parent.parent, versions_since(spec.folder, before, 1)
    test_dir = tested[0] if tested else None
    try:
        fit_rows = read_metrics(fit_dir)
        test_rows = [] if test_dir is None else read_metrics(test_dir)
    except FileNotFoundError as err:
        raise RuntimeError(f"{err}, and the suite reads every run's metrics from that file") from None
    records = [last_record(fit_dir, "fit"), *([] if test_dir is None else [last_record(test_dir, "test")])]
    result = {
        "federation": spec.federation,
        "method": spec.method,
        "seed": spec.seed,
        "overrides": dict(spec.overrides),
        "fit_version": fit_dir.name,
        "test_version": None if test_dir is None else test_dir.name,
        "config_sha256": resolved_config_sha256(fit_dir),
        "inputs_sha256": digest,
        "cpu_s": cpu,
        "wall_s": time.perf_counter() - start,
        "resumed_from_round": 0 if resume is None else resume[1],
        **dict(spec.tags),
        **summarise(fit_rows, test_rows),
        **provenance(records, user_code(spec.configs, dict(spec.overrides))),
        "config_files": config_files(spec),
    }
    if spec.test:
        write_result(spec.folder, result)
    return result


def config_files(spec: RunSpec) -> dict[str, str]:
    """``file -> sha256`` of a run's config files and those they name, each by its path in its git work tree."""
    paths = [*map(Path, spec.configs), *named_configs(spec.configs, dict(spec.overrides))]
    return {repo_label(path): file_sha256(path) for path in paths}


def provenance(records: Sequence[RunRecord | None], user: Mapping[str, str]) -> dict[str, Any]:
    """What a run's ``result.json`` keeps of its commands' run records (fit first, then test).

    Returns:
        ``commit`` (``<hash>+dirty`` with uncommitted changes to fedhet), ``fedhet_version``, ``environment``,
        ``threads`` (the fit's), ``cpu`` (``startup``, ``rounds``, ``evaluation``, summed over the commands),
        ``config_sha256`` (the fit's resolved config, independent of where the run folder lives), ``data_sha256``,
        ``sources`` (every fedhet and user module the commands imported, with its sha256) and ``user_code`` (the
        user packages' files its configs name). Empty when a command wrote no record (a fedhet before them).

    """
    if not records or any(r is None for r in records):
        return {}
    kept = [r for r in records if r is not None]
    fit = kept[0]
    sources: dict[str, str] = {}
    data: dict[str, str] = {}
    for record in kept:
        sources.update(record.sources)
        data.update(record.data_files)
    cpu = sum((r.cpu for r in kept), CpuSeconds())
    return {
        "commit": fit.commit + ("+dirty" if any(r.dirty for r in kept) else ""),
        "fedhet_version": fit.fedhet_version,
        "environment": fit.environment,
        "threads": fit.threads,
        "cpu": {"startup": cpu.startup, "rounds": cpu.rounds, "evaluation": cpu.evaluation},
        "rounds_trained": fit.rounds_trained,
        "resolved_config_sha256": fit.config_sha256,
        "data_sha256": fit.data_sha256,
        "sources": sources,
        "sources_sha256": digest_of(sources),
        "data_files": data,
        "user_code": dict(user),
    }
