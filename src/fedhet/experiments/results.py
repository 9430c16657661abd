"""A suite's table: per federation and method, means over seeds with 95 % intervals, and the tests against the baseline.

The interval is Student's t: ``mean ± t(0.975, n-1) · s / sqrt(n)`` with ``s`` the sample standard deviation over
the ``n`` seeds (undefined for one seed). The comparison takes, seed by seed, the method's value of the suite's
``<metric>_mean`` test metric minus the baseline's on the same federation and seed, and reports the mean difference,
its interval and the paired t-test's two-sided p-value (``scipy.stats.ttest_rel``) over the ``n`` shared seeds
(:func:`paired`). A baseline that gives one number on every seed (a deterministic method, such as FedDaDiL's
``source_only``: :func:`deterministic`) is a reference value, not a sample: the method's values are tested against it
(``scipy.stats.ttest_1samp``). Differences that are the same on every seed have no variance to test with: their p is
undefined, never 0. The p-values of the comparisons in one table are adjusted for their number with Holm's step-down
method (:func:`holm`; Holm, 1979, "A Simple Sequentially Rejective Multiple Test Procedure", Scand. J. Statist. 6),
which keeps the chance of any false "above" or "below" in the table at 5 % when each adjusted p is read against 0.05.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from fedhet.experiments.suite import MIN_SEEDS


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
    """The test summary metrics of the runs (no per-client ones), the suite's metric family first.

    ``test/<name>`` first, then the new clients' ``test_new/<name>`` (clients held out of training, adapted and
    scored after it: :class:`~fedhet.plugins.NewClients`) when the runs logged them.
    """
    names = {k for r in results for k in r["test"] if k.count("/") == 1 and "/loss" not in k}
    ordered = []
    for stage in ("test", "test_new"):
        first = [f"{stage}/{metric}_{kind}" for kind in ("mean", "weighted", "worst")]
        first = [name for name in first if name in names]
        ordered += first + sorted(k for k in names - set(first) if k.startswith(f"{stage}/"))
    return ordered


CONSTANT_TOLERANCE = 1e-9
"""Values closer than this (absolute) count as equal: seeds that agree but for floating-point rounding."""


def _constant(values: Sequence[float]) -> bool:
    """Whether ``values`` (two or more) are one number, up to :data:`CONSTANT_TOLERANCE`."""
    return len(values) >= 2 and float(np.ptp(np.asarray(values, dtype=float))) <= CONSTANT_TOLERANCE


def deterministic(runs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two or more runs gave one number for every test metric they logged (their seeds changed nothing).

    Every metric counts, the losses and per-client values too, so a method whose seeds only happen to give the same
    accuracy is not mistaken for one that ignores its seed.

    Example:
        >>> deterministic([{"test": {"test/acc_mean": 0.5, "test/loss_mean": 1.0}}] * 3)
        True

    """
    if len(runs) < 2:
        return False
    names = set().union(*(r["test"] for r in runs))
    return all(_constant([r["test"].get(name, math.nan) for r in runs]) for name in names)


def paired(
    method: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]], key: str
) -> dict[str, float | int | str]:
    """Method minus baseline on the seeds both ran: mean difference, its 95 % half-width, the test's p, ``n``.

    ``test`` says which test gave ``p``: ``"paired"`` (``ttest_rel``), ``"reference"`` (the baseline is
    :func:`deterministic`, so the method's values are tested against its one value with ``ttest_1samp``),
    ``"undefined"`` (two or more seeds whose differences are all the same, so there is no variance to test with; ``p``
    is ``nan``, never 0) or ``""`` (fewer than two seeds). ``wilcoxon_p`` is the Wilcoxon signed-rank test's
    two-sided p value from 6 pairs on (with 5 or fewer its smallest possible p is above 0.05), ``nan`` below.
    """
    base = {r["seed"]: r["test"].get(key) for r in baseline}
    pairs = [(r["test"][key], base[r["seed"]]) for r in method if base.get(r["seed"]) is not None and key in r["test"]]
    diffs = [a - b for a, b in pairs]
    mean, half = mean_ci(diffs)
    p, wilcoxon, test = math.nan, math.nan, ""
    if _constant(diffs):
        test = "undefined"
    elif len(pairs) >= 2:
        values, reference = [a for a, _ in pairs], [b for _, b in pairs]
        if deterministic([r for r in baseline if r["seed"] in {m["seed"] for m in method}]):
            test, p = "reference", float(stats.ttest_1samp(values, reference[0]).pvalue)
        else:
            test, p = "paired", float(stats.ttest_rel(values, reference).pvalue)
        if len(pairs) >= 6:
            wilcoxon = float(stats.wilcoxon(diffs).pvalue)
    return {"diff": mean, "diff_ci95": half, "p": p, "test": test, "wilcoxon_p": wilcoxon, "n": len(pairs)}


def choice_scores(trials: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """The best complete trial's score and the runner-up's (the next best; ``nan`` when there is none).

    ``trials`` are raw trial rows (``state``, ``score``) of one study, which maximises. Their gap says how firm the
    choice is: a gap within the seed-to-seed spread of one setting's score is a coin flip, and another machine's
    kernels may flip it.

    Example:
        >>> choice_scores([{"state": "COMPLETE", "score": s} for s in (0.90, 0.93, 0.91)])
        (0.93, 0.91)

    """
    scores = sorted(
        (t["score"] for t in trials if t.get("state") == "COMPLETE" and t.get("score") is not None), reverse=True
    )
    return (scores[0] if scores else math.nan), (scores[1] if len(scores) > 1 else math.nan)


def holm(p_values: Sequence[float]) -> list[float]:
    r"""Holm's step-down adjustment of ``p_values`` for their number (``nan``: no test, left out and kept ``nan``).

    With the ``m`` defined p-values sorted, :math:`p_{(1)} \le \dots \le p_{(m)}`, the adjusted value of
    :math:`p_{(i)}` is :math:`\max_{j \le i} \min(1, (m - j + 1)\, p_{(j)})`; reading each against 0.05 keeps
    the chance of one or more false rejections among the ``m`` at most 5 % whatever their dependence.

    Example:
        >>> holm([0.01, 0.04, 0.03, float("nan")])
        [0.03, 0.06, 0.06, nan]

    """
    defined = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(defined):
        running = max(running, min(1.0, (len(defined) - rank) * p))
        adjusted[i] = running
    return adjusted


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

    The tuning columns: ``tuning best`` and ``tuning runner-up``, the validation scores of the chosen trial and of
    the best other complete one (:func:`choice_scores`), and ``tuning gap`` between them, so that a choice decided by
    noise shows.

    Returns:
        the rows; ``vs <baseline> p_holm`` is each comparison's p adjusted by :func:`holm` over every comparison of the
        table (all federations, the baseline's own rows left out), and ``deterministic`` marks a method whose seeds
        all gave the same numbers (a reference value: :func:`deterministic`).

    """
    names = summary_metrics(results, metric)
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["federation"], r["method"]), []).append(r)
    rows = []
    for (federation, method), runs in groups.items():
        row: dict[str, Any] = {"federation": federation, "method": method, "n": len(runs)}
        row["deterministic"] = deterministic(runs)
        for name in names:
            row[name], row[f"{name} ci95"] = mean_ci([r["test"][name] for r in runs if name in r["test"]])
        row.update(_costs(runs, [t for t in trials if (t["federation"], t["method"]) == (federation, method)]))
        row["bytes/round"], _ = mean_ci([r["bytes_per_round"] for r in runs])
        comparison = paired(runs, groups.get((federation, baseline), []), f"test/{metric}_mean")
        if method == baseline:
            comparison.update(p=math.nan, test="", wilcoxon_p=math.nan)
        for key, value in comparison.items():
            row[f"vs {baseline} {key}"] = value
            if key == "p":
                row[f"vs {baseline} p_holm"] = math.nan  # filled in below, once every comparison is known
        name = f"{federation}/{method}"
        ends = (edges or {}).get(name, {})
        row["tuned"] = " ".join(
            f"{k}={v}" + (f" ({ends[k]} end of range)" if k in ends else "") for k, v in tuned.get(name, {}).items()
        )
        scores = choice_scores([t for t in trials if (t["federation"], t["method"]) == (federation, method)])
        row["tuning best"], row["tuning runner-up"] = scores
        row["tuning gap"] = row["tuning best"] - row["tuning runner-up"]
        rows.append(row)
    for row, adjusted in zip(rows, holm([row[f"vs {baseline} p"] for row in rows]), strict=True):
        row[f"vs {baseline} p_holm"] = adjusted
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


def _markdown_cell(row: Mapping[str, Any], key: str, baseline: str) -> str:
    """``row[key]`` as the Markdown table shows it (the comparison and tuning columns read their neighbours)."""
    test = row.get(f"vs {baseline} test", "")
    if key == "method" and row.get("deterministic"):
        return f"{row[key]} (deterministic)"
    if key in (f"vs {baseline} p", f"vs {baseline} p_holm") and test == "undefined":
        return "undefined"
    if key == f"vs {baseline} p" and test == "reference" and not math.isnan(row[key]):
        return f"{row[key]:.4g} (vs reference)"
    if key == f"vs {baseline} diff":
        half, diff = row.get(f"vs {baseline} diff_ci95", math.nan), row.get(key, math.nan)
        return "–" if math.isnan(diff) else f"{diff:+.4f}" + ("" if math.isnan(half) else f" ± {half:.4f}")
    if key == "tuning gap" and not math.isnan(row.get(key, math.nan)):
        return f"{row[key]:+.4f} ({row['tuning best']:.4f} vs {row['tuning runner-up']:.4f})"
    return _cell(row, key)


def to_markdown(rows: Sequence[Mapping[str, Any]], baseline: str, header: Sequence[str]) -> str:
    """The rows as a Markdown table under ``header`` lines (the suite file, the commit, the configs' sha256).

    Columns that the Markdown folds into others (intervals, the test's kind, the tuning scores beside their gap) or
    that hold nothing in any row are left out; ``table.csv`` keeps every column.
    """
    hidden = {"deterministic", f"vs {baseline} diff_ci95", f"vs {baseline} test", "tuning best", "tuning runner-up"}
    columns = [k for k in dict.fromkeys(k for row in rows for k in row) if not k.endswith(" ci95") and k not in hidden]
    columns = [k for k in columns if k != "tuning gap" or any(not math.isnan(row[k]) for row in rows)]
    lines = [*header, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_markdown_cell(row, key, baseline) for key in columns) + " |")
    lines += [
        "",
        "Values: mean ± 95 % Student-t half-width over seeds. `vs` columns: the difference to the baseline seed by"
        " seed, its paired t-test's p (against the baseline's one value when the baseline is deterministic; `undefined`"
        " when the differences are the same on every seed) and that p adjusted by Holm's method over the table's"
        f" comparisons (`p_holm`): read a method as above or below {baseline} only where `p_holm` < 0.05 with at"
        f" least {MIN_SEEDS} seeds, else as level with it. `tuning gap`: the chosen trial's validation score minus the"
        " runner-up's.",
        "Costs: `cpu_s/round` CPU seconds per round of the rounds alone (evaluation and start-up apart),"
        " `startup_s/run` and `wall_s/run` per final run, `tuning_cpu_s` all the method's tuning trials"
        " (`tuning_trials` of them) on the federation.",
    ]
    if any(row["n"] < MIN_SEEDS for row in rows):
        lines += ["", f"Fewer than {MIN_SEEDS} seeds in some rows: their p-values support no conclusion."]
    return "\n".join(lines) + "\n"
