"""The comparison protocol of a suite: seeds, Holm-adjusted p, reference values, pruning budgets, samplers."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from scipy import stats

from fedhet.cli import main
from fedhet.experiments import compare
from fedhet.experiments.raw import trial_row
from fedhet.experiments.report import protocol_lines
from fedhet.experiments.results import choice_scores, deterministic, holm, paired, table_rows, to_markdown
from fedhet.experiments.search_space import SearchSpace, sampler_problem
from fedhet.experiments.suite import SuiteError, load_suite
from fedhet.experiments.trials import pruning_startup
from fedhet.experiments.tuning import tune
from tests.experiments.test_compare import _suite, _table


def _runs(method: str, values: list[float], federation: str = "f", **more: float) -> list[dict[str, Any]]:
    """Runs of ``method`` with ``test/acc_mean`` = ``values`` over seeds 0, 1, ... (and ``more`` on every seed)."""
    return [
        {
            "federation": federation,
            "method": method,
            "seed": seed,
            "test": {"test/acc_mean": value, **more},
            "cpu_s": 1.0,
            "rounds": 1,
            "bytes_per_round": 0.0,
        }
        for seed, value in enumerate(values)
    ]


# ------------------------------------------------------------------------------------------------ Holm's adjustment
def test_holm_matches_its_closed_form_on_a_hand_example() -> None:
    """m = 4: sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005, 3 x 0.01, 2 x 0.03, max(0.06, 1 x 0.04); nan stays out."""
    adjusted = holm([0.01, 0.04, 0.03, math.nan, 0.005])
    assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(adjusted[3])
    assert adjusted[4] == pytest.approx(0.02)
    assert holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])  # capped at 1, never below an earlier one
    assert holm([]) == []


def test_a_table_adjusts_every_comparison_it_holds_and_leaves_the_baseline_rows_out() -> None:
    """Two federations, two methods each besides the baseline: four comparisons in one Holm family."""
    base = [0.50, 0.52, 0.51, 0.53, 0.49]
    results = []
    for federation in ("a", "b"):
        results += _runs("base", base, federation)
        results += _runs("up", [v + d for v, d in zip(base, (0.05, 0.06, 0.04, 0.05, 0.07), strict=True)], federation)
        results += _runs(
            "same", [v + d for v, d in zip(base, (0.01, -0.01, 0.02, -0.02, 0.0), strict=True)], federation
        )
    rows = table_rows(results, "acc", "base", {})
    raw = [row["vs base p"] for row in rows]
    assert [math.isnan(p) for p in raw] == [True, False, False] * 2  # the baseline's rows are no comparison
    expected = holm(raw)
    assert [row["vs base p_holm"] for row in rows] == pytest.approx(expected, nan_ok=True)
    up = rows[1]
    diffs = [0.05, 0.06, 0.04, 0.05, 0.07]
    assert up["vs base p"] == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue)
    assert up["vs base p_holm"] == pytest.approx(min(1.0, 4 * up["vs base p"]))  # the smallest of four (tied with b)


# ------------------------------------------------------------------------------ constant differences, references
def test_constant_differences_give_an_undefined_p_never_zero() -> None:
    """Two methods whose differences are the same on every seed: no variance, no test (scipy says p = 0)."""
    base, method = _runs("base", [0.4, 0.5, 0.6]), _runs("m", [0.5, 0.6, 0.7])
    assert stats.ttest_rel([0.5, 0.6, 0.7], [0.4, 0.5, 0.6]).pvalue == 0.0  # what was printed before
    comparison = paired(method, base, "test/acc_mean")
    assert comparison["test"] == "undefined"
    assert math.isnan(float(comparison["p"]))
    assert comparison["diff"] == pytest.approx(0.1)
    rows = table_rows([*base, *method], "acc", "base", {})
    text = to_markdown(rows, "base", ["# t"])
    header = next(line for line in text.splitlines() if line.startswith("| federation"))
    (line,) = [line for line in text.splitlines() if line.startswith("| f | m ")]
    cells = dict(zip(header.split("|")[1:-1], line.split("|")[1:-1], strict=True))
    cells = {k.strip(): v.strip() for k, v in cells.items()}
    assert (cells["vs base p"], cells["vs base p_holm"]) == ("undefined", "undefined")


def test_a_deterministic_baseline_is_a_reference_value_not_a_paired_sample() -> None:
    """FedDaDiL's source_only: one number on every seed (losses too); the method is tested against that number."""
    reference = _runs("source_only", [0.8] * 5, **{"test/loss_mean": 0.3})
    noisy = _runs("dadil", [0.82, 0.85, 0.81, 0.86, 0.84], **{"test/loss_mean": 0.2})
    assert deterministic(reference)
    assert not deterministic(noisy)
    same_accuracy = _runs("lucky", [0.9, 0.9])
    same_accuracy[1]["test"]["test/loss_mean"], same_accuracy[0]["test"]["test/loss_mean"] = 0.1, 0.2
    assert not deterministic(same_accuracy)  # equal accuracies, different losses: the seed mattered
    comparison = paired(noisy, reference, "test/acc_mean")
    assert comparison["test"] == "reference"
    assert comparison["p"] == pytest.approx(stats.ttest_1samp([0.82, 0.85, 0.81, 0.86, 0.84], 0.8).pvalue)
    rows = table_rows([*reference, *noisy], "acc", "source_only", {})
    text = to_markdown(rows, "source_only", ["# t"])
    assert "| f | source_only (deterministic) |" in text
    assert "(vs reference)" in text


def test_two_deterministic_methods_give_an_undefined_p() -> None:
    rows = table_rows([*_runs("a", [0.5] * 5), *_runs("b", [0.6] * 5)], "acc", "a", {})
    assert rows[1]["vs a test"] == "undefined"
    assert math.isnan(rows[1]["vs a p_holm"])


# ------------------------------------------------------------------------------------- new clients, tuning gap
def test_new_client_columns_follow_the_test_columns_when_present() -> None:
    runs = _runs("m", [0.5, 0.6], **{"test/acc_worst": 0.1, "test_new/acc_mean": 0.4, "test_new/acc_worst": 0.2})
    runs += _runs("old", [0.5, 0.6])  # runs without new clients: their cells are empty
    rows = table_rows(runs, "acc", "m", {})
    columns = [k for k in rows[0] if k.startswith("test")]
    assert columns == [
        "test/acc_mean",
        "test/acc_mean ci95",
        "test/acc_worst",
        "test/acc_worst ci95",
        "test_new/acc_mean",
        "test_new/acc_mean ci95",
        "test_new/acc_worst",
        "test_new/acc_worst ci95",
    ]
    assert rows[0]["test_new/acc_mean"] == pytest.approx(0.4)
    assert math.isnan(rows[1]["test_new/acc_mean"])
    assert "test_new/acc_mean" in to_markdown(rows, "m", [])


def test_the_table_reports_the_gap_between_the_chosen_trial_and_the_runner_up() -> None:
    def objective(overrides: dict[str, Any], handle: Any) -> float:
        return [0.9006, 0.9057, 0.7, 0.9006][handle.number]

    space = SearchSpace.parse({"x": {"type": "float", "low": 0.0, "high": 1.0}}, "t")
    result = tune("gap", space, objective, n_trials=4, storage=None, seed=0)
    trials = [trial_row("s", "f", "m", "gap", trial, 1.0) for trial in result.trials]
    assert choice_scores(trials) == (0.9057, 0.9006)
    rows = table_rows(_runs("m", [0.5, 0.6]), "acc", "m", {}, trials=trials)
    assert rows[0]["tuning gap"] == pytest.approx(0.0051)
    assert "| +0.0051 (0.9057 vs 0.9006) |" in to_markdown(rows, "m", [])
    assert "| tuning gap" not in to_markdown(table_rows(_runs("m", [0.5, 0.6]), "acc", "m", {}), "m", [])


# --------------------------------------------------------------------------------------------- pruning budgets
@pytest.mark.parametrize(("budget", "prunable"), [(8, False), (10, False), (24, True)])
def test_a_small_budget_is_never_pruned(budget: int, prunable: bool) -> None:
    """Every trial after the first reports a round-1 value below all earlier ones: the median rule would prune it.

    Before, with 5 start-up trials, a budget of 8 lost its last 3 trials this way.
    """

    def objective(overrides: dict[str, Any], handle: Any) -> float:
        value = 1.0 - 0.01 * handle.number
        for step in range(3):
            handle.report(value, step)
            if handle.should_prune():
                raise optuna.TrialPruned
        return value

    space = SearchSpace.parse({"x": {"type": "float", "low": 0.0, "high": 1.0}}, "t")
    result = tune(f"budget{budget}", space, objective, n_trials=budget, storage=None, seed=0)
    pruned = [t.number for t in result.trials if t.state == "PRUNED"]
    assert pruning_startup(budget) == max(10, budget // 2)
    if prunable:
        assert pruned == list(range(pruning_startup(budget), budget))
    else:
        assert pruned == []


# ----------------------------------------------------------------------------------------------------- samplers
def test_every_sampler_tunes_and_is_recorded_on_its_study() -> None:
    grid = SearchSpace.parse(
        {"e": {"type": "int", "low": 1, "high": 3}, "opt": {"type": "categorical", "choices": [[1], [1, 2]]}}, "t"
    )
    seen: list[tuple[int, tuple[int, ...]]] = []

    def count(overrides: dict[str, Any], handle: Any) -> float:
        seen.append((overrides["e"], tuple(overrides["opt"])))
        return float(overrides["e"])

    result = tune("grid", grid, count, n_trials=6, storage=None, seed=0, sampler="grid")
    assert sorted(seen) == sorted((e, o) for e in (1, 2, 3) for o in ((1,), (1, 2)))  # each point once
    assert result.best_value == 3.0
    plane = SearchSpace.parse(
        {"x": {"type": "float", "low": -1.0, "high": 1.0}, "y": {"type": "float", "low": -1.0, "high": 1.0}}, "t"
    )
    for sampler in ("random", "cmaes", "tpe"):
        result = tune(
            sampler,
            plane,
            lambda o, h: -(o["x"] ** 2) - o["y"] ** 2,
            n_trials=12,
            storage=None,
            seed=0,
            sampler=sampler,
            random_trials=4,
        )
        assert result.best_value > -0.5


def test_a_study_is_not_continued_with_another_sampler(tmp_path: Path) -> None:
    space = SearchSpace.parse({"x": {"type": "float", "low": 0.0, "high": 1.0}}, "t")
    storage = str(tmp_path / "study.log")
    tune("s", space, lambda o, h: o["x"], n_trials=2, storage=storage, seed=0, sampler="random")
    with pytest.raises(ValueError, match="study 's' was created with sampler random, not tpe"):
        tune("s", space, lambda o, h: o["x"], n_trials=3, storage=storage, seed=0)


@pytest.mark.parametrize(
    ("sampler", "search", "trials", "expected"),
    [
        ("grid", {"lr": {"type": "float", "low": 0.1, "high": 1.0}}, 2, "grid search needs a finite space, and lr"),
        ("grid", {"e": {"type": "int", "low": 1, "high": 3}}, 4, "the grid holds 3 points, fewer than the 4 trials"),
        ("cmaes", {"lr": {"type": "float", "low": 0.1, "high": 1.0}}, 4, "CMA-ES needs two or more numeric keys"),
        ("bayes", {"lr": {"type": "float", "low": 0.1, "high": 1.0}}, 4, "expected one of tpe, random, grid, cmaes"),
    ],
)
def test_a_sampler_that_cannot_search_a_space_is_refused_in_one_line(
    tmp_path: Path, sampler: str, search: dict[str, Any], trials: int, expected: str
) -> None:
    space = SearchSpace.parse(search, "t")
    if sampler != "bayes":
        assert expected in str(sampler_problem(sampler, space, trials))
    spec = yaml.safe_load(_suite(tmp_path).read_text())
    spec["methods"]["fedrep"]["search"] = search
    spec["tuning"] = {"trials": trials, "seeds": [100], "sampler": sampler}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SuiteError) as error:
        load_suite(path)
    assert str(error.value).startswith(f"suite file '{path}': tuning.sampler: ")
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


# ----------------------------------------------------------------------------------------------- seeds, header
def test_a_comparison_with_fewer_than_five_seeds_must_say_why(tmp_path: Path) -> None:
    spec = yaml.safe_load(_suite(tmp_path).read_text())
    del spec["few_seeds"]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SuiteError, match=r"seeds: 2 seeds; a comparison needs at least 5 \(or say why in few_seeds"):
        load_suite(path)
    spec["seeds"] = [0, 1, 2, 3, 4]
    path.write_text(yaml.safe_dump(spec))
    assert load_suite(path).few_seeds is None
    spec["few_seeds"] = ""
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SuiteError, match="few_seeds: expected the reason"):
        load_suite(path)


def test_the_header_states_the_seeds_and_the_tuning_protocol(tmp_path: Path) -> None:
    path = _suite(tmp_path, tuning={"trials": 6, "seeds": [100, 101], "sampler": "random"})
    lines = protocol_lines(load_suite(path))
    assert lines["seeds"] == "2 final seeds [0, 1] (fewer than 5: a smoke test of the command in CI, not a comparison)"
    assert lines["tuning"] == (
        "6 trials per method and federation, random sampler, scored on val/acc_mean averaged over seeds [100, 101];"
        " median pruning on seed 100 after 10 complete trials, from a fit's round 2"
    )


def test_tuning_averages_its_seeds_and_prunes_on_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tuning seeds: a trial scores the mean of both fits' last validation value; only seed 100's fit is pruned."""
    suite = load_suite(_suite(tmp_path, tuning={"trials": 2, "seeds": [100, 101], "metric": "val/acc_mean"}))
    fits: list[tuple[int, bool]] = []

    def fake_execute(spec: Any, block: bool = False) -> dict[str, Any]:
        pruning = any("OptunaPruning" in arg for arg in spec.extra_fit_args)
        fits.append((spec.seed, pruning))
        return {"val": [{"round": 0, "val/acc_mean": 0.5 if spec.seed == 100 else 0.7}]}

    monkeypatch.setattr(compare, "execute", fake_execute)
    compare.tune_method(suite, "digits", "fedrep")
    assert fits == [(100, True), (101, False)] * 2
    trials = compare.trial_rows(suite, "digits", "fedrep")
    assert [t["score"] for t in trials] == pytest.approx([0.6, 0.6])


# -------------------------------------------------------------------------------------------------- new clients
@pytest.mark.slow
def test_a_suite_with_new_clients_reports_them_beside_the_training_clients(tmp_path: Path) -> None:
    """FedAvg and FedRep holding 2 of the 10 digits clients out: the table's test_new columns are the runs' own."""
    new_clients = {"class_path": "fedhet.plugins.NewClients", "init_args": {"fraction": 0.2, "adapt_epochs": 1}}
    spec = yaml.safe_load(_suite(tmp_path).read_text())
    spec.update(seeds=[0], tuning=None)
    for method in spec["methods"].values():
        method["overrides"]["trainer.sampler"] = new_clients
        method.pop("search", None)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    main(["compare", "-c", str(path)])
    out = tmp_path / "out"
    table = _table(out)
    for method in ("fedavg", "fedrep"):
        result = json.loads((out / "runs" / "digits" / method / "seed0" / "result.json").read_text())
        trained = {key.rsplit("/", 1)[1] for key in result["test"] if key.startswith("test/acc/")}
        held_out = {key.rsplit("/", 1)[1] for key in result["test"] if key.startswith("test_new/acc/")}
        assert (len(trained), len(held_out)) == (8, 2)
        assert not trained & held_out
        row = table[("digits", method)]
        assert float(row["test_new/acc_mean"]) == pytest.approx(result["test"]["test_new/acc_mean"])
        assert float(row["test/acc_mean"]) == pytest.approx(result["test"]["test/acc_mean"])
    assert "test_new/acc_mean" in (out / "table.md").read_text()


# ------------------------------------------------------------------------------------ domain adaptation's labels
@pytest.mark.parametrize(
    ("metric", "refused"),
    [
        ("val/source_acc_mean", False),
        ("val/source_acc_worst", False),
        ("val/acc_mean", True),  # the mean over every client, the target included
        ("val/acc_e_mean", True),
        ("val/acc_source_only_weighted", True),
        ("val/target_acc_mean", True),
        ("val/acc/mnist5k", True),
    ],
)
def test_a_module_declares_the_metrics_that_read_the_targets_labels(metric: str, refused: bool) -> None:
    from fedhet.experiments.pruning import OptunaPruning
    from fedhet.experiments.trials import check_label_free
    from fedhet.modules import FedAvg, FedDaDiL

    assert check_label_free(metric, FedAvg, "tuning", "metric") == metric  # declares none
    callback = OptunaPruning("study.log", "s", 0, monitor=metric)
    if not refused:
        assert check_label_free(metric, FedDaDiL, "tuning", "metric") == metric
        callback.on_federation_start(None, FedDaDiL.__new__(FedDaDiL))
        return
    with pytest.raises(ValueError, match=f"field 'metric' is '{metric}', which FedDaDiL computes from the target's"):
        check_label_free(metric, FedDaDiL, "tuning", "metric")
    with pytest.raises(ValueError, match=f"OptunaPruning: field 'monitor' is '{metric}', which FedDaDiL"):
        callback.on_federation_start(None, FedDaDiL.__new__(FedDaDiL))


def test_a_suite_tuning_feddadil_on_the_targets_labels_is_refused_before_anything_runs() -> None:
    shipped = Path(__file__).resolve().parents[2] / "benchmarks" / "suites" / "feddadil_digits.yaml"
    suite = load_suite(shipped)
    assert suite.tuning is not None
    leaky = dataclasses.replace(suite, tuning=dataclasses.replace(suite.tuning, metric="val/acc_mean"))
    pairs = [("mnist5k", "source_only"), ("mnist5k", "feddadil_e")]
    compare.check_command_lines(suite, pairs, {})  # the shipped suite tunes on the sources' validation
    with pytest.raises(SuiteError) as error:
        compare.check_command_lines(leaky, pairs, {})
    message = str(error.value)
    assert "\n" not in message
    assert "feddadil_e on mnist5k: tuning: field 'metric' is 'val/acc_mean', which FedDaDiL computes" in message
    assert "source_only" not in message  # not tuned: nothing chosen on its metrics
