"""A suite's raw results: one small row per final run and one per tuning trial, committed beside its table.

Three files in the suite's results folder, from which :mod:`~fedhet.experiments.report` rebuilds the table and the
figures alone (``fedhet compare -c suite.yaml --report``), and on which every interval and p-value of the table can
be recomputed or audited:

- ``runs.jsonl`` (:func:`run_row`): per final run, its federation, method, seed, tuned values and overrides, every
  final test metric (clients' included) and the final round's validation metrics (clients' included), the
  validation summaries of every evaluated round, its costs (CPU seconds by part, wall seconds, bytes per round),
  the commit and environment fingerprint it ran with, its threads, and the digests of its inputs and sources;
- ``trials.jsonl`` (:func:`trial_row`): per tuning trial, its study, number, state, parameters, score, the round it
  was pruned after, and its CPU seconds;
- ``sources.json``: ``sources_sha256 -> {module: sha256}``, the fedhet and user modules each set of runs imported
  (the rows name their set by its digest), for the freshness check (``benchmarks/check_results.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

RUNS_FILE = "runs.jsonl"
TRIALS_FILE = "trials.jsonl"
SOURCES_FILE = "sources.json"
_NEEDED = ("federation", "method", "seed", "tuned", "test", "val", "rounds", "bytes_per_round", "cpu_s")


def _summary(row: Mapping[str, Any]) -> dict[str, Any]:
    """A round's validation summaries (``val/<name>``, no client's) and its ``round``."""
    return {k: v for k, v in row.items() if k == "round" or k.count("/") == 1}


def run_row(suite: str, result: Mapping[str, Any], tuned: Mapping[str, Any]) -> dict[str, Any]:
    """The raw row of a final run, from its ``result.json`` (:func:`~fedhet.experiments.runs.execute`).

    Args:
        suite: the suite's name.
        result: the run's result.
        tuned: the tuned values its method ran with on its federation (``{}`` when not tuned).

    """
    val = list(result.get("val", []))
    cpu = result.get("cpu")
    return {
        "suite": suite,
        "federation": result["federation"],
        "method": result["method"],
        "seed": result["seed"],
        "tuned": dict(tuned),
        "overrides": dict(result.get("overrides", {})),
        "test": dict(result["test"]),
        "val_final": {k: v for k, v in (val[-1] if val else {}).items() if k != "round"},
        "val": [_summary(row) for row in val],
        "rounds": result["rounds"],
        "resumed_from_round": result.get("resumed_from_round", 0),
        "rounds_trained": result.get("rounds_trained"),
        "bytes_per_round": result["bytes_per_round"],
        "cpu_s": result["cpu_s"],
        "cpu": dict(cpu) if isinstance(cpu, Mapping) else None,
        "wall_s": result.get("wall_s"),
        "threads": result.get("threads"),
        "commit": result.get("commit", "unknown"),
        "environment": result.get("environment"),
        "inputs_sha256": result.get("inputs_sha256"),
        "method_sha256": result.get("method_sha256"),
        "config_sha256": result.get("resolved_config_sha256"),
        "data_sha256": result.get("data_sha256"),
        "user_code": result.get("user_code"),
        "config_files": result.get("config_files"),
        "data_files": result.get("data_files"),
        "sources_sha256": result.get("sources_sha256"),
    }


def trial_row(
    suite: str,
    federation: str,
    method: str,
    study: str,
    trial: Any,
    cpu_s: float | None,
) -> dict[str, Any]:
    """The raw row of a tuning trial (a :class:`~fedhet.experiments.tuning.TrialRecord`) and its CPU seconds."""
    return {
        "suite": suite,
        "federation": federation,
        "method": method,
        "study": study,
        "number": trial.number,
        "state": trial.state,
        "params": dict(trial.overrides),
        "score": trial.value,
        "pruned_round": trial.pruned_round,
        "cpu_s": cpu_s,
    }


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(row, sort_keys=True, allow_nan=True) + "\n" for row in rows)


def write_raw(
    folder: Path,
    runs: Sequence[Mapping[str, Any]],
    trials: Sequence[Mapping[str, Any]],
    sources: Mapping[str, Mapping[str, str]],
) -> list[Path]:
    """Write ``runs.jsonl``, ``trials.jsonl`` and ``sources.json`` into ``folder``; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / RUNS_FILE, folder / TRIALS_FILE, folder / SOURCES_FILE]
    paths[0].write_text(_jsonl(runs))
    paths[1].write_text(_jsonl(trials))
    paths[2].write_text(json.dumps({k: dict(v) for k, v in sorted(sources.items())}, indent=1, sort_keys=True) + "\n")
    return paths


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"raw results {str(path)!r}, line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"raw results {str(path)!r}, line {number}: not a JSON object")
        rows.append(row)
    return rows


def read_raw(folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run rows and trial rows of a results folder.

    Raises:
        FileNotFoundError: when the folder holds no ``runs.jsonl`` (a table written before raw results were kept).
        ValueError: naming the file and line of a row that is not a JSON object, or a run row missing a field the
            table needs.

    """
    runs_path = folder / RUNS_FILE
    if not runs_path.is_file():
        raise FileNotFoundError(f"no raw results in '{folder}': {RUNS_FILE} is missing (a table from before them)")
    runs = _read_jsonl(runs_path)
    for number, row in enumerate(runs, start=1):
        missing = [
            k for k in ("federation", "method", "seed", "test", "val", "rounds", "bytes_per_round") if k not in row
        ]
        if missing:
            raise ValueError(f"raw results {str(runs_path)!r}, line {number}: field '{missing[0]}' is missing")
    trials_path = folder / TRIALS_FILE
    return runs, (_read_jsonl(trials_path) if trials_path.is_file() else [])


def read_sources(folder: Path) -> dict[str, dict[str, str]]:
    """``sources_sha256 -> {module: sha256}`` of a results folder (empty without ``sources.json``)."""
    path = folder / SOURCES_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
