"""A suite file: the methods, federations and seeds ``fedhet compare`` runs, read and checked before anything runs.

.. code-block:: yaml

    name: smoke
    federations: {heart: configs/data/heart_sites.yaml, own: null}  # null: each method config's own data
    methods:
      fedavg: {config: configs/fedavg/digits.yaml, overrides: {trainer.rounds: 3}}
      fedrep:
        config: configs/fedrep/digits.yaml
        search: {model.init_args.lr: {type: float, low: 0.01, high: 0.3, log: true}}
    seeds: [0, 1]
    few_seeds: a smoke test of the command, not a comparison  # needed below 5 seeds: why so few (in the table)
    baseline: fedavg
    metric: acc             # the test accuracy family compared: test/acc_mean, test/acc_weighted, test/acc_worst
    tuning: {trials: 3, seeds: [100], storage: tuning.log, metric: val/acc_mean, sampler: tpe}  # random_trials too
    workers: 2              # runs at once (default: the CPU count)
    threads: 1              # compute threads of each run (default 1): a table never depends on workers or cores
    output: fedhet_runs/suites/smoke
    results: ../../results/smoke  # optional: where the table and figures go (default: output)

Config paths and ``results`` are read relative to the folder of the suite file, ``output`` (default
``fedhet_runs/suites/<name>``) and a tuning storage file relative to the current folder (the storage file inside
``output``). ``output`` holds the run folders, the tuning trials and ``tuned.yaml``; ``results`` gets ``table.md``,
``table.csv``, the figures and a copy of ``tuned.yaml``, so a results folder kept under version control is rewritten
by the one command while the runs stay out of it.

A suite compares methods, so it runs at least :data:`MIN_SEEDS` final seeds: a suite file with fewer is refused
unless ``few_seeds`` says why (a smoke test; a paper-scale run whose runs take an hour each), and that reason is
printed in the table's header. ``tuning.seeds`` may name several seeds, whose validation scores each trial averages;
``tuning.sampler`` is one of :data:`~fedhet.experiments.search_space.SAMPLERS`, checked against every method's search
space before anything runs (:func:`~fedhet.experiments.search_space.sampler_problem`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedhet.experiments.bounded_yaml import YAMLInputError, read_bounded_yaml
from fedhet.experiments.search_space import SAMPLERS, SearchSpace, sampler_problem

_TOP = {
    "name",
    "federations",
    "methods",
    "seeds",
    "few_seeds",
    "baseline",
    "metric",
    "tuning",
    "workers",
    "threads",
    "output",
    "results",
}
_METHOD = {"config", "overrides", "search"}
_TUNING = {"trials", "seeds", "storage", "metric", "random_trials", "sampler"}

MIN_SEEDS = 5
"""The fewest final seeds of a comparison (``few_seeds`` says why a suite runs fewer); ``docs/experiments.md``."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class SuiteError(ValueError):
    """A suite file that cannot run: one line naming the file and the field."""


@dataclass(frozen=True)
class MethodSpec:
    """One method of a suite.

    Attributes:
        config: the method's ``fedhet fit`` config.
        overrides: ``dotted.key -> value`` given after the config as ``--key=value``.
        search: the search space tuned before the final runs (``None``: no tuning).

    """

    config: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    search: SearchSpace | None = None


@dataclass(frozen=True)
class TuningSpec:
    """How the suite tunes the methods that have a search space.

    Attributes:
        trials: trials per method and federation.
        seeds: the seeds each trial runs (never the final seeds).
        storage: the Optuna storage (a journal file or a database URL).
        metric: the validation metric maximised.
        sampler: the Optuna sampler (:data:`~fedhet.experiments.search_space.SAMPLERS`).
        random_trials: TPE's start-up trials, drawn at random (``None``: Optuna's 10, so a study of 10 trials or
            fewer is a seeded random search).

    """

    trials: int
    seeds: list[int]
    storage: str
    metric: str
    random_trials: int | None = None
    sampler: str = "tpe"


@dataclass(frozen=True)
class Suite:
    """A checked suite file (see the module docstring)."""

    path: Path
    name: str
    federations: dict[str, Path | None]
    methods: dict[str, MethodSpec]
    seeds: list[int]
    baseline: str
    metric: str
    tuning: TuningSpec | None
    workers: int
    output: Path
    results: Path | None = None
    threads: int = 1
    few_seeds: str | None = None

    @property
    def results_folder(self) -> Path:
        """Where ``fedhet compare`` writes the table, the figures and a copy of ``tuned.yaml`` (``output`` if unset)."""
        return self.output if self.results is None else self.results


def field_error(path: Path, where: str, problem: str) -> SuiteError:
    """The one-line error of field ``where`` of the suite file ``path``."""
    return SuiteError(f"suite file '{path}': {where}: {problem}")


def _mapping(path: Path, where: str, value: Any, allowed: set[str] | None = None) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not value:
        raise field_error(path, where, f"expected a non-empty mapping, got {value!r}")
    unknown = sorted(str(key) for key in value if allowed is not None and key not in allowed)
    if unknown:
        raise field_error(path, where, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed or ()))})")
    return value


def _file(path: Path, where: str, value: Any) -> Path:
    if not isinstance(value, str) or not value:
        raise field_error(path, where, f"expected a file path, got {value!r}")
    resolved = (path.parent / value).resolve()
    if not resolved.is_file():
        raise field_error(path, where, f"no file '{value}' (read from {path.parent})")
    return resolved


def _seeds(path: Path, where: str, value: Any) -> list[int]:
    if (
        not isinstance(value, list)
        or not value
        or any(isinstance(s, bool) or not isinstance(s, int) for s in value)
        or len(set(value)) != len(value)
    ):
        raise field_error(path, where, f"expected a non-empty list of distinct integers, got {value!r}")
    return list(value)


def _name(path: Path, where: str, value: Any) -> str:
    """A suite's, method's or federation's name (it names a folder): letters, digits, ``-``, ``_``, ``.``; no ``..``."""
    if not isinstance(value, str) or not _PLAIN_NAME.fullmatch(value) or ".." in value or value == ".":
        raise field_error(
            path, where, f"{value!r} is not a plain name (letters, digits, '-', '_', '.'; no '..'): it names a folder"
        )
    return value


def _positive(path: Path, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise field_error(path, where, f"expected a positive integer, got {value!r}")
    return value


def _method(path: Path, name: str, value: Any) -> MethodSpec:
    where = f"methods.{name}"
    spec = _mapping(path, where, value, _METHOD)
    if "config" not in spec:
        raise field_error(path, where, "missing 'config' (the method's fedhet fit config)")
    overrides = spec.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        raise field_error(path, f"{where}.overrides", f"expected a mapping of dotted config keys, got {overrides!r}")
    search = None
    if spec.get("search") is not None:
        try:
            search = SearchSpace.parse(spec["search"], f"suite file '{path}': {where}.search")
        except ValueError as err:
            raise SuiteError(str(err)) from None
    return MethodSpec(_file(path, f"{where}.config", spec["config"]), {str(k): v for k, v in overrides.items()}, search)


def _tuning(path: Path, value: Any, seeds: list[int], output: Path) -> TuningSpec:
    spec = _mapping(path, "tuning", value, _TUNING)
    tuning_seeds = _seeds(path, "tuning.seeds", spec.get("seeds", [max(seeds) + 1]))
    shared = sorted(set(tuning_seeds) & set(seeds))
    if shared:
        raise field_error(path, "tuning.seeds", f"seed {shared[0]} is also a final seed; tune on other seeds")
    metric = spec.get("metric", "val/acc_mean")
    if not isinstance(metric, str) or not metric.startswith("val"):
        raise field_error(path, "tuning.metric", f"expected a validation metric (val/...), got {metric!r}")
    storage = spec.get("storage", "tuning.log")
    if not isinstance(storage, str) or not storage:
        raise field_error(path, "tuning.storage", f"expected a journal file or a database URL, got {storage!r}")
    if "://" not in storage:
        storage = str(output / storage)
    random_trials = spec.get("random_trials")
    sampler = spec.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        raise field_error(path, "tuning.sampler", f"expected one of {', '.join(SAMPLERS)}, got {sampler!r}")
    return TuningSpec(
        _positive(path, "tuning.trials", spec.get("trials", 10)),
        tuning_seeds,
        storage,
        metric,
        None if random_trials is None else _positive(path, "tuning.random_trials", random_trials),
        sampler,
    )


def load_suite(path: str | Path) -> Suite:
    """Read and check a suite file.

    Raises:
        SuiteError: one line naming the file (and the field): a file that is not UTF-8 or not YAML, nested too deep or
            whose aliases expand too far (:func:`~fedhet.experiments.bounded_yaml.read_bounded_yaml`), an unknown key,
            a name that is not a plain name (it becomes a folder), a missing file, a baseline that is not a method,
            fewer than :data:`MIN_SEEDS` seeds without ``few_seeds``, tuning seeds among the final seeds, a malformed
            search space, a sampler that cannot search a method's space.

    """
    path = Path(path).resolve()
    if not path.is_file():
        raise SuiteError(f"suite file '{path}': no such file")
    try:
        raw = read_bounded_yaml(path)
    except YAMLInputError as err:
        raise SuiteError(f"suite file '{path}': {err.problem}") from None
    top = _mapping(path, "the file", raw, _TOP)
    for key in ("name", "methods", "seeds", "baseline"):
        if key not in top:
            raise field_error(path, key, "missing")
    name = _name(path, "name", top["name"])
    federations_raw = top.get("federations") or {"default": None}
    federations = {
        _name(path, "federations", fed): None if cfg is None else _file(path, f"federations.{fed}", cfg)
        for fed, cfg in _mapping(path, "federations", federations_raw).items()
    }
    methods = {
        _name(path, "methods", m): _method(path, str(m), spec)
        for m, spec in _mapping(path, "methods", top["methods"]).items()
    }
    seeds = _seeds(path, "seeds", top["seeds"])
    few_seeds = top.get("few_seeds")
    if few_seeds is not None and (not isinstance(few_seeds, str) or not few_seeds.strip()):
        raise field_error(path, "few_seeds", f"expected the reason for fewer than {MIN_SEEDS} seeds, got {few_seeds!r}")
    if len(seeds) < MIN_SEEDS and few_seeds is None:
        raise field_error(
            path,
            "seeds",
            f"{len(seeds)} seeds; a comparison needs at least {MIN_SEEDS} (or say why in few_seeds, e.g. a smoke test)",
        )
    baseline = top["baseline"]
    if baseline not in methods:
        raise field_error(path, "baseline", f"{baseline!r} is not one of the methods ({', '.join(methods)})")
    metric = top.get("metric", "acc")
    if not isinstance(metric, str) or not metric or "/" in metric:
        raise field_error(path, "metric", f"expected a test metric family such as 'acc', got {metric!r}")
    output = Path(str(top.get("output", f"fedhet_runs/suites/{name}")))
    tuning = None if top.get("tuning") is None else _tuning(path, top["tuning"], seeds, output.resolve())
    if tuning is None and any(m.search is not None for m in methods.values()):
        tuning = _tuning(path, {}, seeds, output.resolve())
    for m, spec in methods.items():
        problem = (
            None
            if tuning is None or spec.search is None
            else sampler_problem(tuning.sampler, spec.search, tuning.trials)
        )
        if problem is not None:
            raise field_error(path, "tuning.sampler", f"methods.{m}: {problem}")
    workers = _positive(path, "workers", top.get("workers", os.cpu_count() or 1))
    threads = _positive(path, "threads", top.get("threads", 1))
    results = top.get("results")
    if results is not None and (not isinstance(results, str) or not results):
        raise field_error(path, "results", f"expected a folder path, got {results!r}")
    return Suite(
        path,
        name,
        federations,
        methods,
        seeds,
        baseline,
        metric,
        tuning,
        workers,
        output.resolve(),
        None if results is None else (path.parent / results).resolve(),
        threads,
        few_seeds,
    )
