"""``fedhet compare -c suite.yaml``: tune, run every (federation, method, seed), and write the suite's results.

Runs go ``workers`` at a time, each a ``fedhet fit`` and a ``fedhet test`` in one new child of the warm run processes
(:func:`~fedhet.experiments.runs.execute`, :mod:`~fedhet.experiments.warm`: torch, Lightning and fedhet are imported
once per suite, not once per run); a run whose ``result.json`` came from its current inputs is skipped, so a
suite stopped half-way goes on where it stopped, a stopped run from its last checkpoint. ``--seeds`` and ``--methods``
run part of a suite (a long suite in parts); a table written before every run has finished says which runs it covers.
Before anything runs, the command line of every method with work left is parsed as ``fedhet fit`` parses it
(:mod:`~fedhet.experiments.preflight`), so an option its class does not take stops the suite at once, not when that
method's first run starts.
A method with a search space is first tuned per federation on the tuning seeds (:func:`~fedhet.experiments.tuning.tune`,
validation only, pruned through the study's storage), and its final runs use the chosen values (``tuned.yaml``). The
study is named after the sha256 of what the tuning depends on (:func:`method_sha256`: the method's and the
federation's config files, its overrides, its search space and the tuning settings): a suite whose method was edited
(a wider range, another config) tunes it again in a new study, and its runs, whose inputs then differ, run again;
the methods left as they were keep their studies and runs. Several ``fedhet compare`` of one suite (on one machine or
on machines sharing its output folder and tuning storage) share its work: each tunes through the shared study, takes
the runs no other process is running, then waits for the others' runs, and each writes the whole table. The results
folder (the suite's ``results``, default ``output``) gets the raw results (:mod:`~fedhet.experiments.raw`: a row per
final run and per tuning trial), then ``table.md``, ``table.csv`` (:mod:`~fedhet.experiments.results`) and the
figures (:mod:`~fedhet.experiments.plots`) made from those rows alone (:mod:`~fedhet.experiments.report`: ``--report``
makes them again with no run folder), each naming the suite file, the commits and environments of the runs and the
sha256 of their inputs; and a copy of ``tuned.yaml``.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedhet.experiments.runs import (
    RunDivergedError,
    RunHeldError,
    RunSpec,
    arguments,
    current_result,
    execute,
    inputs_sha256,
)
from fedhet.experiments.suite import Suite, SuiteError, field_error, load_suite
from fedhet.experiments.trials import RANDOM_TRIALS, WARMUP_ROUNDS, pruning_startup
from fedhet.plugins.storage.run_record import recorded_cpu, resolved_config_text

TUNED_FILE = "tuned.yaml"


def _configs(suite: Suite, federation: str, method: str) -> tuple[Path, ...]:
    data = suite.federations[federation]
    return (suite.methods[method].config, *(() if data is None else (data,)))


def method_sha256(suite: Suite, federation: str, method: str) -> str:
    """The sha256 of what ``method``'s tuning on ``federation`` depends on.

    That is the method's and the federation's config files (their bytes), the method's fixed overrides, its search
    space and the suite's tuning settings (budget, seeds, metric, TPE's start-up trials, sampler and pruning rule)
    when it has a search space, and the suite's ``threads`` when not 1; no path, so a suite whose output folder moved
    keeps its studies and runs.
    """
    spec, tuning = suite.methods[method], suite.tuning
    settings = None
    if spec.search is not None and tuning is not None:  # start-up trials only when set
        start = [] if tuning.random_trials is None else [tuning.random_trials]
        protocol = {"sampler": tuning.sampler, "pruning": [pruning_startup(tuning.trials), WARMUP_ROUNDS]}
        settings = [tuning.trials, tuning.seeds, tuning.metric, *start, protocol]
    return inputs_sha256(
        _configs(suite, federation, method),
        overrides=dict(spec.overrides),
        search=None if spec.search is None else repr(spec.search),
        tuning=settings,
        **({} if suite.threads == 1 else {"threads": suite.threads}),
    )


def _values_text(overrides: Mapping[str, Any]) -> str:
    """``key=value, ...`` with numbers to 4 significant digits and each key's last dotted part."""
    return ", ".join(
        f"{key.rsplit('.', 1)[-1]}={value:.4g}" if isinstance(value, float) else f"{key.rsplit('.', 1)[-1]}={value}"
        for key, value in overrides.items()
    )


def run_spec(suite: Suite, federation: str, method: str, seed: int, overrides: Mapping[str, Any]) -> RunSpec:
    """The final run of ``method`` on ``federation`` with ``seed`` and the given (tuned) overrides."""
    return RunSpec(
        federation=federation,
        method=method,
        seed=seed,
        configs=_configs(suite, federation, method),
        overrides={**suite.methods[method].overrides, **overrides},
        folder=suite.output / "runs" / federation / method / f"seed{seed}",
        threads=suite.threads,
        group=suite.name,
        tags={"method_sha256": method_sha256(suite, federation, method)},
    )


def tune_method(suite: Suite, federation: str, method: str, say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Tune ``method`` on ``federation`` over the tuning seeds (trials in sequence); return the chosen overrides.

    A trial whose fit diverges (:class:`~fedhet.experiments.runs.RunDivergedError`) scores the worst value; any other
    failure stops the suite. ``say`` gets a line as each trial finishes: its number, values and score (or the round
    after which it was pruned).
    """
    from fedhet.experiments.tuning import TrialHandle, objective_value, tune

    tuning, spec = suite.tuning, suite.methods[method]
    assert tuning is not None
    assert spec.search is not None
    digest = method_sha256(suite, federation, method)[:12]
    trials = suite.output / "tuning" / federation / method / digest

    def objective(overrides: dict[str, Any], handle: TrialHandle) -> float:
        values = []
        for index, seed in enumerate(tuning.seeds):
            base = run_spec(suite, federation, method, seed, overrides)
            trial = RunSpec(
                **{
                    **base.__dict__,
                    "folder": trials / f"trial{handle.number}" / f"seed{seed}",
                    # the first seed's fit reports its rounds to the pruner: every trial is ranked on the same seed
                    "extra_fit_args": tuple(handle.cli_args(tuning.metric)) if index == 0 else (),
                    "test": False,
                }
            )
            try:
                values.append(objective_value(execute(trial)["val"], tuning.metric))
            except RunDivergedError:  # a bad trial (e.g. a step size too large), not a broken suite
                values = [math.nan]  # recorded as the worst value
                break
            if handle.pruned:  # no other seed runs for a pruned trial
                break
        score = sum(values) / len(values)
        if say is not None:
            ending = "pruned" if handle.pruned else f"{tuning.metric} {score:.4g}"
            say(f"tuning {method} on {federation}: trial {handle.number} ({_values_text(overrides)}): {ending}")
        return score

    if "://" not in tuning.storage:
        Path(tuning.storage).parent.mkdir(parents=True, exist_ok=True)
    result = tune(
        study_name(suite, federation, method),
        spec.search,
        objective,
        tuning.trials,
        tuning.storage,
        tuning.seeds[0],
        random_trials=RANDOM_TRIALS if tuning.random_trials is None else tuning.random_trials,
        warmup_rounds=WARMUP_ROUNDS,
        sampler=tuning.sampler,
    )
    return result.best_overrides


def study_name(suite: Suite, federation: str, method: str) -> str:
    """The Optuna study that tunes ``method`` on ``federation``: ``<suite>/<federation>/<method>/<digest>``."""
    return f"{suite.name}/{federation}/{method}/{method_sha256(suite, federation, method)[:12]}"


def check_command_lines(suite: Suite, pairs: Sequence[tuple[str, str]], tuned: Mapping[str, Mapping[str, Any]]) -> None:
    """Parse the ``fedhet fit`` command line of every (federation, method) in ``pairs`` before anything runs.

    A method with a search space is checked with the values of :meth:`SearchSpace.examples
    <fedhet.experiments.search_space.SearchSpace.examples>` (both ends of every range, every choice), one without
    with its tuned values (``tuned``, ``<federation>/<method> -> overrides``), through
    :func:`~fedhet.experiments.preflight.check_commands`; a searched method's model class must not compute the tuning
    metric from a domain adaptation target's labels (its ``target_label_metrics``).

    Raises:
        SuiteError: one line naming each method and federation whose command line ``fedhet fit`` refuses, or whose
            tuning metric reads a target's labels, and why.

    """
    from fedhet.experiments.preflight import check_commands

    labels, commands, metrics = [], [], []
    for federation, method in pairs:
        search = suite.methods[method].search
        for values in search.examples() if search else [tuned.get(f"{federation}/{method}", {})]:
            labels.append(f"{method} on {federation}")
            commands.append(arguments(run_spec(suite, federation, method, suite.seeds[0], values), "fit"))
            metrics.append(suite.tuning.metric if search is not None and suite.tuning is not None else None)
    errors = check_commands(commands, metrics)
    refused = dict.fromkeys(f"{label}: {error}" for label, error in zip(labels, errors, strict=True) if error)
    if refused:
        raise field_error(suite.path, "methods", f"fedhet fit refuses {'; '.join(refused)}")


def suite_label(path: Path) -> str:
    """``path`` relative to the root of its git work tree (no machine's folders in a results file), else its name."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True, text=True, check=True
        )
        return path.resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
    except (OSError, subprocess.CalledProcessError, ValueError):
        return path.name


def read_tuned(suite: Suite) -> dict[str, dict[str, Any]]:
    """The chosen overrides so far (``output/tuned.yaml``): ``"<federation>/<method>" -> overrides``."""
    path = suite.output / TUNED_FILE
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def tuned_at_edges(suite: Suite, tuned: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """``"<federation>/<method>" -> {key: "low" | "high"}`` for the tuned values at an end of their search range."""
    edges = {}
    for name, values in tuned.items():
        spec = suite.methods.get(name.split("/", 1)[1])
        ends = spec.search.at_edges(values) if spec is not None and spec.search is not None else {}
        if ends:
            edges[name] = ends
    return edges


def trial_rows(suite: Suite, federation: str, method: str) -> list[dict[str, Any]]:
    """The raw rows of ``method``'s tuning trials on ``federation`` (none without a search space or a study yet).

    A trial's CPU seconds are those its runs recorded (:func:`~fedhet.plugins.storage.run_record.recorded_cpu`),
    ``None`` when one of them recorded none.
    """
    from fedhet.experiments.raw import trial_row
    from fedhet.experiments.tuning import study_trials

    tuning = suite.tuning
    if tuning is None or suite.methods[method].search is None:
        return []
    digest = method_sha256(suite, federation, method)[:12]
    study = study_name(suite, federation, method)
    folder = suite.output / "tuning" / federation / method / digest
    rows = []
    for trial in study_trials(study, tuning.storage):
        ran = [folder / f"trial{trial.number}" / f"seed{seed}" for seed in tuning.seeds]
        spent = [recorded_cpu(seed) for seed in ran if seed.is_dir()]  # a pruned trial stops after its first seed
        cpu = None if not spent or None in spent else math.fsum(s for s in spent if s is not None)
        rows.append(trial_row(suite.name, federation, method, study, trial, cpu))
    return rows


def write_results(
    suite: Suite, results: list[dict[str, Any]], tuned: Mapping[str, Mapping[str, Any]], planned: int | None = None
) -> list[Path]:
    """Write the raw results, then ``table.md``, ``table.csv`` and the figures from them, and a copy of ``tuned.yaml``.

    The raw files (:mod:`~fedhet.experiments.raw`: ``runs.jsonl``, ``trials.jsonl``, ``sources.json``) are written
    first and the table is made from them alone (:func:`~fedhet.experiments.report.write_report`), as ``fedhet
    compare --report`` makes it again.

    Args:
        suite: the suite.
        results: the finished runs' results.
        tuned: the chosen overrides per ``federation/method``.
        planned: unused (the table compares the runs to the suite's to say what it covers); kept for callers.

    Returns:
        the paths written (``tuned.yaml`` only when the results folder is not ``output``, where it already is).

    """
    from fedhet.experiments.raw import run_row, write_raw
    from fedhet.experiments.report import write_report

    del planned
    folder = suite.results_folder
    runs = [run_row(suite.name, r, tuned.get(f"{r['federation']}/{r['method']}", {})) for r in results]
    pairs = dict.fromkeys((r["federation"], r["method"]) for r in results)
    trials = [row for f, m in pairs for row in trial_rows(suite, f, m)]
    sources = {r["sources_sha256"]: r["sources"] for r in results if r.get("sources_sha256")}
    raw = write_raw(folder, runs, trials, sources)
    written = [*write_report(suite, suite_label(suite.path), tuned_at_edges(suite, tuned)), *raw]
    if folder != suite.output and (suite.output / TUNED_FILE).is_file():
        written.append(Path(shutil.copyfile(suite.output / TUNED_FILE, folder / TUNED_FILE)))
    return written


@dataclass
class _Tally:
    """What a suite has done so far, as each of its progress lines begins: ``[runs 3 done, 42 to do; ...]``."""

    runs_total: int
    studies_total: int
    runs_done: int = 0
    studies_done: int = 0
    start: float = field(default_factory=time.monotonic)

    def finished(self, study: bool) -> None:
        if study:
            self.studies_done += 1
        else:
            self.runs_done += 1

    def line(self, text: str) -> str:
        elapsed = datetime.timedelta(seconds=round(time.monotonic() - self.start))
        studies = f"; tunings {self.studies_done} of {self.studies_total}" if self.studies_total else ""
        return f"[runs {self.runs_done} done, {self.runs_total - self.runs_done} to do{studies}; {elapsed}] {text}"


def compare(
    suite: Suite,
    progress: Callable[[str], None] | None = None,
    seeds: Sequence[int] | None = None,
    methods: Sequence[str] | None = None,
) -> list[Path]:
    """Run a suite (see the module docstring) and return the results files written.

    Args:
        suite: a checked suite (:func:`~fedhet.experiments.suite.load_suite`).
        progress: called with a line when a run, a tuning trial or a tuning finishes, each line led by the runs done
            and to do, the tunings done and the time so far (``None``: printed, and flushed, as it comes; above a
            ``rich`` progress bar in a terminal).
        seeds: run only these of the suite's seeds (``None``: all); the table covers every finished run.
        methods: run (and tune) only these of the suite's methods (``None``: all).

    Raises:
        RuntimeError: when a run fails (its log is named); runs finished before it keep their ``result.json``.
        SuiteError: when ``seeds`` or ``methods`` names one the suite does not have, or when ``fedhet fit`` refuses
            the command line of a method that has runs or a tuning to do (:func:`check_command_lines`), before
            anything runs.

    """
    for flag, chosen, known in (("--seeds", seeds, suite.seeds), ("--methods", methods, list(suite.methods))):
        unknown = [x for x in chosen or () if x not in known]
        if unknown:
            raise field_error(suite.path, flag, f"{unknown} not among the suite's {flag[2:]} {known}")
    chosen_methods = set(suite.methods if methods is None else methods)
    tuned_path = suite.output / TUNED_FILE
    tuned = read_tuned(suite)
    order = [(f, m, s) for f in suite.federations for m in suite.methods for s in suite.seeds]
    selected = [(f, m, s) for f, m, s in order if (seeds is None or s in seeds) and m in chosen_methods]
    pairs = list(dict.fromkeys((f, m) for f, m, _ in selected))
    to_tune = [(f, m) for f, m in pairs if suite.methods[m].search]  # a study that holds its trials returns at once

    def result(f: str, m: str, s: int) -> dict[str, Any] | None:
        return current_result(run_spec(suite, f, m, s, tuned.get(f"{f}/{m}", {})))

    def todo(federation: str, method: str) -> list[int]:
        return [s for f, m, s in selected if (f, m) == (federation, method) and result(f, m, s) is None]

    from rich.progress import Progress

    counted = {pair: todo(*pair) for pair in pairs}  # with the values tuned so far; a new tuning may add runs
    check_command_lines(suite, [pair for pair in pairs if pair in to_tune or counted[pair]], tuned)
    suite.output.mkdir(parents=True, exist_ok=True)
    bar = Progress(disable=progress is not None or not sys.stdout.isatty(), transient=False)
    runs_total = sum(map(len, counted.values()))
    task = bar.add_task(f"suite {suite.name}", total=runs_total + len(to_tune))
    tally = _Tally(runs_total, len(to_tune))
    write: Callable[[str], None] = progress or (
        bar.console.print if not bar.disable else functools.partial(print, flush=True)  # a log: each line as it comes
    )

    def say(line: str) -> None:
        write(tally.line(line))

    def done(line: str, study: bool = False) -> None:
        bar.advance(task)
        tally.finished(study)
        say(line)

    with bar, ThreadPoolExecutor(max_workers=suite.workers) as pool:
        jobs: dict[Future[Any], tuple[str, str, int | None]] = {}

        held: list[tuple[str, str, int]] = []  # runs another process was running: waited for once ours are done

        def submit_runs(federation: str, method: str, left: Sequence[int], block: bool = False) -> None:
            for s in left:
                spec = run_spec(suite, federation, method, s, tuned.get(f"{federation}/{method}", {}))
                jobs[pool.submit(execute, spec, block)] = (federation, method, s)

        for pair in pairs:
            if pair not in to_tune:
                submit_runs(*pair, counted[pair])
        for f, m in to_tune:
            jobs[pool.submit(tune_method, suite, f, m, say)] = (f, m, None)
        while jobs:
            finished, _ = wait(list(jobs), return_when=FIRST_COMPLETED)
            for future in finished:
                f, m, s = jobs.pop(future)
                try:
                    value = future.result()
                except RunHeldError:
                    if s is None:
                        raise
                    held.append((f, m, s))
                    say(f"another process runs {m} on {f}, seed {s}: waiting for it after ours")
                    continue
                if s is None:
                    tuned[f"{f}/{m}"] = value
                    tuned_path.write_text(yaml.safe_dump(tuned, sort_keys=False))
                    left = todo(f, m)
                    tally.runs_total += len(left) - len(counted[(f, m)])
                    bar.update(task, total=tally.runs_total + len(to_tune))
                    done(f"tuned {m} on {f}: {_values_text(value)}", study=True)
                    submit_runs(f, m, left)
                else:
                    metric = f"test/{suite.metric}_mean"
                    score = value.get("test", {}).get(metric)
                    scored = "" if score is None else f", {metric} {score:.4g}"
                    done(f"ran {m} on {f}, seed {s}: {value['cpu_s']:.1f} CPU s{scored}")
            if not jobs:
                for f, m, s in held:
                    submit_runs(f, m, [s], block=True)
                held.clear()
    results = [result(f, m, s) for f, m, s in order]
    complete = [r for r in results if r is not None]
    written = write_results(suite, complete, tuned, planned=len(order))
    summarise_on_wandb(suite, complete, written)
    return written


def report(suite: Suite) -> list[Path]:
    """``fedhet compare --report``: the table and figures again from the results folder's raw files alone.

    Raises:
        SuiteError: naming the results folder when it holds no raw results.

    """
    from fedhet.experiments.raw import read_raw
    from fedhet.experiments.report import tuned_values, write_report

    try:
        rows, _ = read_raw(suite.results_folder)
    except (FileNotFoundError, ValueError) as err:
        raise field_error(suite.path, "results", str(err)) from None
    return write_report(suite, suite_label(suite.path), tuned_at_edges(suite, tuned_values(rows)))


def summarise_on_wandb(suite: Suite, results: Sequence[Mapping[str, Any]], written: Sequence[Path]) -> str | None:
    """Log the suite's W&B summary run when its runs logged to W&B (:mod:`~fedhet.experiments.wandb_summary`).

    Returns:
        the summary run's local files folder, or ``None`` when nothing was logged.

    """
    from fedhet.experiments.wandb_summary import log_summary

    texts = (
        resolved_config_text(run_spec(suite, r["federation"], r["method"], r["seed"], {}).folder / r["fit_version"])
        for r in results
    )
    configs = [yaml.safe_load(text) for text in texts if "WandbLogger" in text]  # no YAML parsing without W&B
    if not configs:
        return None
    table = next(p for p in written if p.name == "table.csv")
    figures = [p for p in written if p.suffix == ".png"]
    from fedhet.experiments.raw import read_raw
    from fedhet.experiments.report import covers, stamp

    rows, trials = read_raw(suite.results_folder)
    return log_summary(
        suite.name, configs, table, figures, stamp(suite_label(suite.path), rows, trials, covers(suite, rows))[1]
    )


def main(argv: list[str]) -> None:
    """``fedhet compare -c suite.yaml``: exit 2 with one line on a bad suite file, 1 with one line on a failed run."""
    parser = argparse.ArgumentParser(prog="fedhet compare", description=__doc__.split("\n")[0])
    parser.add_argument("-c", "--config", required=True, help="the suite file (YAML)")
    parser.add_argument("--seeds", type=int, nargs="+", help="run only these of the suite's seeds (default: all)")
    parser.add_argument("--methods", nargs="+", help="run only these of the suite's methods (default: all)")
    parser.add_argument(
        "--report",
        action="store_true",
        help="run nothing: write the table and figures again from the results folder's raw files (runs.jsonl)",
    )
    args = parser.parse_args(argv)
    try:
        suite = load_suite(args.config)
        written = report(suite) if args.report else compare(suite, seeds=args.seeds, methods=args.methods)
    except SuiteError as err:
        sys.stderr.write(f"fedhet compare: error: {err}\n")
        sys.exit(2)
    except RuntimeError as err:
        sys.exit(f"fedhet compare: error: {err}")
    print(f"results in {suite.results_folder}: {', '.join(p.name for p in written)}")
    tuned = read_tuned(suite)
    for name, ends in tuned_at_edges(suite, tuned).items():
        for key, end in ends.items():
            print(f"note: {name}: {key} = {tuned[name][key]:.4g} was chosen at the {end} end of its search range")
