"""A suite's table: per federation and method, means over seeds with 95 % intervals, and the paired baseline test.

The interval is Student's t: ``mean ± t(0.975, n-1) · s / sqrt(n)`` with ``s`` the sample standard deviation over
the ``n`` seeds (undefined for one seed). The paired comparison takes, seed by seed, the method's value of the suite's
``<metric>_mean`` test metric minus the baseline's on the same federation and seed, and reports the mean difference,
its interval and the paired t-test's two-sided p-value (``scipy.stats.ttest_rel``) over the ``n`` shared seeds.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and the half-width of its 95 % Student-t interval (``nan`` for fewer than 2 values)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if x.size < 2:
        return float(x.mean()), math.nan
    half = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return float(x.mean()), half


def summary_metrics(results: Sequence[Mapping[str, Any]], metric: str) -> list[str]:
    """The test summary metrics of the runs (``test/<name>``, no per-client ones), the suite's metric family first."""
    names = {k for r in results for k in r["test"] if k.count("/") == 1}
    first = [f"test/{metric}_{kind}" for kind in ("mean", "weighted", "worst") if f"test/{metric}_{kind}" in names]
    return first + sorted(names - set(first) - {k for k in names if "/loss" in k})


def paired(
    method: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]], key: str
) -> dict[str, float | int]:
    """Method minus baseline on the seeds both ran: mean difference, its 95 % half-width, ``ttest_rel`` p, ``n``.

    ``wilcoxon_p`` is the Wilcoxon signed-rank test's two-sided p value from 6 pairs on (with 5 or fewer its smallest
    possible p is above 0.05), ``nan`` below.
    """
    base = {r["seed"]: r["test"].get(key) for r in baseline}
    pairs = [(r["test"][key], base[r["seed"]]) for r in method if base.get(r["seed"]) is not None and key in r["test"]]
    diffs = [a - b for a, b in pairs]
    mean, half = mean_ci(diffs)
    p = math.nan
    if len(pairs) >= 2 and any(d != 0 for d in diffs):
        p = float(stats.ttest_rel([a for a, _ in pairs], [b for _, b in pairs]).pvalue)
    wilcoxon = math.nan
    if len(pairs) >= 6 and any(d != 0 for d in diffs):
        wilcoxon = float(stats.wilcoxon(diffs).pvalue)
    return {"diff": mean, "diff_ci95": half, "p": p, "wilcoxon_p": wilcoxon, "n": len(pairs)}


def table_rows(
    results: Sequence[Mapping[str, Any]],
    metric: str,
    baseline: str,
    tuned: Mapping[str, Mapping[str, Any]],
    edges: Mapping[str, Mapping[str, str]] | None = None,
    *,
    trials: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """One row per (federation, method), in the order the runs came, with every number of the table.

    Args:
        results: the runs' raw rows (:func:`~fedhet.experiments.raw.run_row`) or ``result.json`` contents.
        metric: the suite's test metric family (``acc``).
        baseline: the baseline method.
        tuned: ``"<federation>/<method>" -> chosen overrides`` of tuned methods.
        edges: ``"<federation>/<method>" -> {key: "low" | "high"}``: chosen values at an end of their search range
            (:meth:`~fedhet.experiments.search_space.SearchSpace.at_edges`), marked in the ``tuned`` column.
        trials: the tuning trials' raw rows (:func:`~fedhet.experiments.raw.trial_row`), for the tuning cost.

    Cost columns: ``cpu_s/round``, the CPU seconds of the rounds alone (training, aggregation, server steps) per
    round trained; ``startup_s/run``, the CPU seconds of start-up per run (interpreter, imports, data, model, and the
    test's); ``wall_s/run``; ``tuning_cpu_s`` and ``tuning_trials``, the CPU seconds of all the method's tuning
    trials on the federation and their number. A cost the runs did not record (runs of a fedhet before the run
    record) is ``nan``.

    """
    names = summary_metrics(results, metric)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["federation"], r["method"]), []).append(r)
    rows = []
    for (federation, method), runs in groups.items():
        row: dict[str, Any] = {"federation": federation, "method": method, "n": len(runs)}
        for name in names:
            row[name], row[f"{name} ci95"] = mean_ci([r["test"][name] for r in runs if name in r["test"]])
        row.update(_costs(runs, [t for t in trials if (t["federation"], t["method"]) == (federation, method)]))
        row["bytes/round"], _ = mean_ci([r["bytes_per_round"] for r in runs])
        comparison = paired(runs, groups.get((federation, baseline), []), f"test/{metric}_mean")
        row.update({f"vs {baseline} {k}": v for k, v in comparison.items()})
        ends = (edges or {}).get(f"{federation}/{method}", {})
        row["tuned"] = " ".join(
            f"{k}={v}" + (f" ({ends[k]} end of range)" if k in ends else "")
            for k, v in tuned.get(f"{federation}/{method}", {}).items()
        )
        rows.append(row)
    return rows


def _costs(runs: Sequence[Mapping[str, Any]], trials: Sequence[Mapping[str, Any]]) -> dict[str, float | int]:
    """The cost columns of one (federation, method): see :func:`table_rows`."""
    cpu = [r.get("cpu") for r in runs]
    split = [c for c in cpu if isinstance(c, Mapping)]
    trained = [r["rounds"] - r.get("resumed_from_round", 0) for r in runs]  # by the process the cpu was measured in
    per_round, startup = math.nan, math.nan
    if len(split) == len(runs):
        per_round, _ = mean_ci([c["rounds"] / max(n, 1) for c, n in zip(split, trained, strict=True)])
        startup, _ = mean_ci([c["startup"] for c in split])
    walls = [r.get("wall_s") for r in runs]
    wall = mean_ci([w for w in walls if w is not None])[0] if None not in walls else math.nan
    spent = [t.get("cpu_s") for t in trials]
    return {
        "cpu_s/round": per_round,
        "startup_s/run": startup,
        "wall_s/run": wall,
        "tuning_cpu_s": math.fsum(s for s in spent if s is not None) if None not in spent else math.nan,
        "tuning_trials": len(trials),
    }


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as CSV text (numbers in full precision)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _cell(row: Mapping[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    half = row.get(f"{key} ci95")
    if half is not None:
        return f"{value:.4f}" if math.isnan(half) else f"{value:.4f} ± {half:.4f}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def to_markdown(rows: Sequence[Mapping[str, Any]], baseline: str, header: Sequence[str]) -> str:
    """The rows as a Markdown table under ``header`` lines (the suite file, the commit, the configs' sha256)."""
    columns = [k for k in dict.fromkeys(k for row in rows for k in row) if not k.endswith(" ci95")]
    columns = [k for k in columns if k != f"vs {baseline} diff_ci95"]
    lines = [*header, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for key in columns:
            if key == f"vs {baseline} diff":
                half = row.get(f"vs {baseline} diff_ci95", math.nan)
                diff = row.get(key, math.nan)
                cells.append(
                    "–" if math.isnan(diff) else f"{diff:+.4f}" + ("" if math.isnan(half) else f" ± {half:.4f}")
                )
            else:
                cells.append(_cell(row, key))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Values: mean ± 95 % Student-t half-width over seeds; `vs` columns: paired with the baseline per seed.",
        "Costs: `cpu_s/round` CPU seconds per round of the rounds alone (evaluation and start-up apart),"
        " `startup_s/run` and `wall_s/run` per final run, `tuning_cpu_s` all the method's tuning trials"
        " (`tuning_trials` of them) on the federation.",
    ]
    return "\n".join(lines) + "\n"
