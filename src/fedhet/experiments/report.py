"""A suite's table and figures, made from its raw results alone (:mod:`~fedhet.experiments.raw`).

``fedhet compare`` writes the raw rows and then this report from them; ``fedhet compare -c suite.yaml --report``
writes it again from the committed raw files, with no run folder. The header names what the table is made of: the
suite file, the commits and environment fingerprints of the runs it aggregates (a table of runs of several commits
or machines says so in its first lines, with the runs of each), the sha256 of the runs' inputs (configs, overrides,
seeds, user code: the same wherever the checkout lives), the raw files, the seeds (with ``few_seeds``' reason) and
the tuning protocol (:func:`protocol_lines`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedhet.core.provenance import environment_id
from fedhet.experiments.raw import RUNS_FILE, TRIALS_FILE, read_raw
from fedhet.experiments.suite import MIN_SEEDS, Suite
from fedhet.experiments.trials import RANDOM_TRIALS, WARMUP_ROUNDS, pruning_startup


def environment_label(env: Mapping[str, Any] | None, threads: Any) -> str:
    """One line naming an environment fingerprint and the threads its runs used."""
    if not env:
        return "unknown (runs from before fedhet recorded it)"
    build = str(env.get("torch_build", ""))[:12]
    return (
        f"torch {env.get('torch')} ({build}), {env.get('cpu_capability')} kernels, {env.get('cpu')},"
        f" Python {env.get('python')}, {env.get('os')}; {threads} torch thread{'s' if threads != 1 else ''}"
    )


def _run_name(row: Mapping[str, Any]) -> str:
    return f"{row['method']} on {row['federation']} seed {row['seed']}"


def _environment_key(row: Mapping[str, Any]) -> str:
    env = row.get("environment")
    return environment_id({**env, "threads": row.get("threads")}) if env else "unknown"


def _groups(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        value = _environment_key(row) if key == "environment" else str(row.get(key) or "unknown")
        groups.setdefault(value, []).append(row)
    return groups


def _listed(name: str, runs: Sequence[Mapping[str, Any]], total: int) -> str:
    which = "" if len(runs) == total or len(runs) > 6 else ": " + ", ".join(map(_run_name, runs))
    return f"`{name}` ({len(runs)} run{'s' if len(runs) != 1 else ''}{which})"


def inputs_sha256(rows: Sequence[Mapping[str, Any]]) -> str:
    """One sha256 over the runs' input digests, in row order (independent of where the checkout or runs live)."""
    return hashlib.sha256("\n".join(str(r.get("inputs_sha256")) for r in rows).encode()).hexdigest()


def stamp(
    suite_label: str, rows: Sequence[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]], covers: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The header lines of ``table.md`` and what the CSV, the figures and W&B name (``key -> value``).

    Args:
        suite_label: the suite file, relative to its repository.
        rows: the run rows the table aggregates.
        trials: the tuning trial rows.
        covers: what part of the suite the rows cover, when not all of it.

    """
    commits, environments = _groups(rows, "commit"), _groups(rows, "environment")
    meta = {
        "suite": suite_label,
        "commit": next(iter(commits)) if len(commits) == 1 else "mixed",
        "environment": next(iter(environments)) if len(environments) == 1 else "mixed",
        "inputs_sha256": inputs_sha256(rows),
    }
    lines = []
    mixed = [f"{len(g)} {what}" for what, g in (("commits", commits), ("environments", environments)) if len(g) > 1]
    if mixed:
        lines += [
            f"**Mixed runs: {' and '.join(mixed)}.** A difference between rows may come from the code or the machine's"
            " kernels, not from the methods alone; the runs of each are listed below.",
            "",
        ]
    lines += [f"- suite: `{suite_label}`", f"- commit: `{meta['commit']}`"]
    if len(commits) > 1:
        lines += [f"  - {_listed(c, runs, len(rows))}" for c, runs in commits.items()]
    for key, runs in environments.items():
        label = environment_label(runs[0].get("environment"), runs[0].get("threads"))
        lines.append(f"- environment: `{key}` {label}" + (f" ({_listed(key, runs, len(rows))})" if mixed else ""))
    lines.append(f"- inputs_sha256: `{meta['inputs_sha256']}`")
    lines.append(f"- raw results: `{RUNS_FILE}` ({len(rows)} runs), `{TRIALS_FILE}` ({len(trials)} tuning trials)")
    if covers:
        meta["covers"] = covers
        lines.append(f"- covers: `{covers}`")
    return lines, meta


def protocol_lines(suite: Suite) -> dict[str, str]:
    """What a table's header says of how its numbers were made: the seeds and the tuning protocol."""
    lines = {"seeds": f"{len(suite.seeds)} final seeds {suite.seeds}"}
    if suite.few_seeds is not None:
        lines["seeds"] += f" (fewer than {MIN_SEEDS}: {suite.few_seeds})"
    tuning = suite.tuning
    if tuning is not None and any(m.search is not None for m in suite.methods.values()):
        random = RANDOM_TRIALS if tuning.random_trials is None else tuning.random_trials
        start = f", its first {random} at random" if tuning.sampler in ("tpe", "cmaes") else ""
        lines["tuning"] = (
            f"{tuning.trials} trials per method and federation, {tuning.sampler} sampler{start}, scored on"
            f" {tuning.metric} averaged over seeds {tuning.seeds}; median pruning on seed {tuning.seeds[0]} after"
            f" {pruning_startup(tuning.trials)} complete trials, from a fit's round {WARMUP_ROUNDS + 1}"
        )
    return lines


def covers(suite: Suite, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """What part of the suite ``rows`` cover, when fewer than all its runs (``None``: all of them)."""
    planned = len(suite.federations) * len(suite.methods) * len(suite.seeds)
    if len(rows) >= planned:
        return None
    seeds = sorted({r["seed"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    return (
        f"{len(rows)} of {planned} runs (methods {', '.join(methods)} of {list(suite.methods)};"
        f" seeds {', '.join(map(str, seeds))} of {suite.seeds})"
    )


def tuned_values(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``"<federation>/<method>" -> tuned values`` as the runs recorded them."""
    return {f"{r['federation']}/{r['method']}": dict(r["tuned"]) for r in rows if r.get("tuned")}


def write_report(suite: Suite, suite_label: str, edges: Mapping[str, Mapping[str, str]] | None = None) -> list[Path]:
    """Write ``table.md``, ``table.csv`` and the figures of ``suite`` from its results folder's raw files alone.

    Args:
        suite: the suite (its results folder, metric and baseline).
        suite_label: the suite file as the header names it.
        edges: tuned values at an end of their search range (``"<federation>/<method>" -> {key: end}``).

    Raises:
        FileNotFoundError: when the results folder holds no raw results.

    """
    from fedhet.experiments.plots import plot_suite
    from fedhet.experiments.results import table_rows, to_csv, to_markdown

    folder = suite.results_folder
    rows, trials = read_raw(folder)
    header, meta = stamp(suite_label, rows, trials, covers(suite, rows))
    protocol = protocol_lines(suite)
    header += [f"- {key}: `{value}`" for key, value in protocol.items()]
    meta.update(protocol)
    table = table_rows(rows, suite.metric, suite.baseline, tuned_values(rows), edges, trials=trials)
    md, csv_path = folder / "table.md", folder / "table.csv"
    md.write_text(to_markdown(table, suite.baseline, [f"# Suite {suite.name}", "", *header]))
    csv_path.write_text("".join(f"# {k}: {v}\n" for k, v in meta.items()) + to_csv(table))
    return [md, csv_path, *plot_suite(rows, suite.metric, folder, meta)]
