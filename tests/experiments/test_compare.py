"""``fedhet compare`` end to end on the smoke suite: the table against the runs' own metrics, resuming, bad files."""

from __future__ import annotations

import csv
import importlib
import inspect
import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch
import yaml
from scipy import stats

from fedhet.cli import main
from fedhet.core.provenance import source_tree
from fedhet.experiments.compare import check_command_lines, method_sha256, run_spec, tune_method, tuned_at_edges
from fedhet.experiments.results import paired, table_rows
from fedhet.experiments.runs import arguments, run_sha256
from fedhet.experiments.suite import SuiteError, load_suite
from fedhet.experiments.trials import open_storage

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "suites" / "smoke.yaml"


def _suite(tmp_path: Path, **changes: object) -> Path:
    """The smoke suite with absolute config paths, its output in ``tmp_path``, and ``changes`` applied."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    suite = yaml.safe_load(SMOKE.read_text())
    for method in suite["methods"].values():
        method["config"] = str((SMOKE.parent / method["config"]).resolve())
    suite["output"] = str(tmp_path / "out")
    suite.update(changes)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def _table(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    lines = [line for line in (out / "table.csv").read_text().splitlines() if not line.startswith("#")]
    return {(row["federation"], row["method"]): row for row in csv.DictReader(lines)}


def _test_metric(run: Path, key: str) -> float:
    """``key`` read from the run's test metrics.csv (the version folder whose metrics hold test columns)."""
    for metrics in sorted(run.glob("version_*/metrics.csv")):
        with metrics.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row.get(key):
                    return float(row[key])
    raise AssertionError(f"no {key} under {run}")


def _exit_2(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    """``fedhet compare -c path *flags``, which must exit with status 2: its standard error."""
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "-c", str(path), *flags])
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip()


def _stamps(out: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("result.json")}


def _check_raw_results(tmp_path: Path, path: Path, values: dict[str, list[float]], tuned: float) -> None:
    """Raw rows beside the table, a header naming what it holds, its costs, the table rebuilt from the rows alone."""
    out, res = tmp_path / "out", tmp_path / "committed" / "smoke"
    runs = [json.loads(line) for line in (res / "runs.jsonl").read_text().splitlines()]
    assert [(r["method"], r["seed"]) for r in runs] == [("fedavg", 0), ("fedavg", 1), ("fedrep", 0), ("fedrep", 1)]
    for r in runs:
        assert r["test"]["test/acc_mean"] == pytest.approx(values[r["method"]][r["seed"]])
        assert any(k.startswith("test/acc/") for k in r["test"])  # every client's final test metric
        assert any(k.startswith("val/acc/") for k in r["val_final"])  # and validation metric
        assert [row["round"] for row in r["val"]] == [0, 1]  # the validation summaries per round
        assert all(k == "round" or k.count("/") == 1 for row in r["val"] for k in row)
        assert set(r["cpu"]) == {"startup", "rounds", "evaluation"}
        assert r["threads"] == 1
        assert set(r["config_files"]) == {f"configs/{r['method']}/digits.yaml"}  # by their path in the repository
    assert [r["tuned"] for r in runs] == [{}, {}, *[{"model.init_args.lr": tuned}] * 2]
    trials = [json.loads(line) for line in (res / "trials.jsonl").read_text().splitlines()]
    assert [(t["method"], t["number"], t["state"]) for t in trials] == [("fedrep", n, "COMPLETE") for n in range(3)]
    assert all(t["cpu_s"] > 0 and set(t["params"]) == {"model.init_args.lr"} for t in trials)
    assert tuned in [t["params"]["model.init_args.lr"] for t in trials]
    sources = json.loads((res / "sources.json").read_text())
    assert {r["sources_sha256"] for r in runs} <= set(sources)
    # the header names the runs' commit and environment; the costs are the rounds' CPU and the tuning's
    tree = source_tree()
    text = (res / "table.md").read_text()
    assert f"- commit: `{tree.commit}{'+dirty' if tree.dirty else ''}`" in text
    assert f"{torch.backends.cpu.get_cpu_capability()} kernels" in text
    assert "Mixed" not in text
    table = _table(res)
    for method in ("fedavg", "fedrep"):
        mine = [r for r in runs if r["method"] == method]
        row = table[("digits", method)]
        assert float(row["cpu_s/round"]) == pytest.approx(statistics.mean(r["cpu"]["rounds"] / 2 for r in mine))
        assert float(row["startup_s/run"]) == pytest.approx(statistics.mean(r["cpu"]["startup"] for r in mine))
    assert table[("digits", "fedrep")]["tuning_trials"] == "3"
    assert float(table[("digits", "fedrep")]["tuning_cpu_s"]) == pytest.approx(sum(t["cpu_s"] for t in trials))
    assert (table[("digits", "fedavg")]["tuning_trials"], float(table[("digits", "fedavg")]["tuning_cpu_s"])) == (
        "0",
        0,
    )
    # `fedhet compare --report`: the same table and CSV from the raw files alone, with no run folder left
    written = {name: (res / name).read_text() for name in ("table.md", "table.csv")}
    (out / "runs").rename(tmp_path / "runs_aside")
    for name in written:
        (res / name).unlink()
    try:
        main(["compare", "-c", str(path), "--report"])
        assert {name: (res / name).read_text() for name in written} == written
    finally:
        (tmp_path / "runs_aside").rename(out / "runs")


@pytest.mark.slow
@pytest.mark.distributed
def test_smoke_suite_table_resume_and_tuning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _suite(tmp_path, results="committed/smoke")  # relative to the suite file's folder
    out, res = tmp_path / "out", tmp_path / "committed" / "smoke"
    main(["compare", "-c", str(path)])
    lines = capsys.readouterr().out.splitlines()  # one per trial, tuning and run, as each finishes
    assert sum(re.search(r"tuning fedrep on digits: trial \d \(lr=[\d.e-]+\): val/acc_mean [\d.]+$", x) is not None
               for x in lines) == 3  # fmt: skip
    assert sum(" tuned fedrep on digits: lr=" in line for line in lines) == 1
    assert sum(re.search(r"\] ran fed(avg|rep) on digits, seed [01]: [\d.]+ CPU s", x) is not None for x in lines) == 4
    assert [line for line in lines if line.startswith("[")][-1].startswith("[runs 4 done, 0 to do; tunings 1 of 1; ")
    assert not (out / "table.md").exists()  # the runs stay in output, the results go to `results`
    assert (res / "tuned.yaml").read_text() == (out / "tuned.yaml").read_text()
    table = _table(res)
    assert set(table) == {("digits", "fedavg"), ("digits", "fedrep")}
    values = {
        m: [_test_metric(out / "runs" / "digits" / m / f"seed{s}", "test/acc_mean") for s in (0, 1)]
        for m in ("fedavg", "fedrep")
    }
    for method, accs in values.items():
        row = table[("digits", method)]
        assert row["n"] == "2"
        assert float(row["test/acc_mean"]) == pytest.approx(statistics.mean(accs))
        half = stats.t.ppf(0.975, 1) * statistics.stdev(accs) / math.sqrt(2)
        assert float(row["test/acc_mean ci95"]) == pytest.approx(half)
        worst = [_test_metric(out / "runs" / "digits" / method / f"seed{s}", "test/acc_worst") for s in (0, 1)]
        assert float(row["test/acc_worst"]) == pytest.approx(statistics.mean(worst))
    diffs = [a - b for a, b in zip(values["fedrep"], values["fedavg"], strict=True)]
    row = table[("digits", "fedrep")]
    assert float(row["vs fedavg diff"]) == pytest.approx(statistics.mean(diffs))
    t = statistics.mean(diffs) / (statistics.stdev(diffs) / math.sqrt(2))
    assert float(row["vs fedavg p"]) == pytest.approx(2 * stats.t.sf(abs(t), 1))
    # tuning: 3 trials on seed 100 only, the chosen rate in tuned.yaml, the table and the final runs' configs
    tuned = yaml.safe_load((out / "tuned.yaml").read_text())["digits/fedrep"]["model.init_args.lr"]
    trials = out / "tuning" / "digits" / "fedrep" / method_sha256(load_suite(path), "digits", "fedrep")[:12]
    assert sorted(p.name for p in trials.iterdir()) == ["trial0", "trial1", "trial2"]
    assert f"model.init_args.lr={tuned}" in row["tuned"]
    final = yaml.safe_load(
        next((out / "runs" / "digits" / "fedrep" / "seed0").glob("version_0/config.yaml")).read_text()
    )
    assert final["model"]["init_args"]["lr"] == pytest.approx(tuned)
    assert (res / "val_digits.png").stat().st_size > 0
    _check_raw_results(tmp_path, path, values, tuned)

    before = _stamps(out)
    versions = {p for p in (out / "runs").rglob("version_*")}
    main(["compare", "-c", str(path)])  # everything has a result: nothing runs
    assert _stamps(out) == before
    assert {p for p in (out / "runs").rglob("version_*")} == versions

    (out / "runs" / "digits" / "fedavg" / "seed1" / "result.json").unlink()
    main(["compare", "-c", str(path)])
    after = _stamps(out)
    rerun = [p for p in after if before.get(p) != after[p]]
    assert rerun == [out / "runs" / "digits" / "fedavg" / "seed1" / "result.json"]
    new = {p for p in (out / "runs").rglob("version_*")} - versions
    assert {p.parent for p in new} == {out / "runs" / "digits" / "fedavg" / "seed1"}

    # fedrep's search widened: tuned again in a new study, its runs run again (the old ones moved aside), fedavg kept
    spec = yaml.safe_load(path.read_text())
    spec["methods"]["fedrep"]["search"]["model.init_args.lr"]["high"] = 0.5
    path.write_text(yaml.safe_dump(spec))
    before = _stamps(out)
    main(["compare", "-c", str(path)])
    after = _stamps(out)
    fedrep = out / "runs" / "digits" / "fedrep"
    assert {p for p in before if after.get(p) != before[p]} == {fedrep / f"seed{s}" / "result.json" for s in (0, 1)}
    assert {p for p in after if p not in before} == {fedrep / f"seed{s}.stale1" / "result.json" for s in (0, 1)}
    assert len(list(trials.parent.iterdir())) == 2  # two studies, one per search space
    retuned = yaml.safe_load((out / "tuned.yaml").read_text())["digits/fedrep"]["model.init_args.lr"]
    final = yaml.safe_load(next((fedrep / "seed0").glob("version_0/config.yaml")).read_text())
    assert final["model"]["init_args"]["lr"] == pytest.approx(retuned)
    assert _table(res)[("digits", "fedrep")]["n"] == "2"


@pytest.mark.slow
@pytest.mark.distributed
def test_seeds_runs_part_of_a_suite_and_its_table_says_what_it_covers(tmp_path: Path) -> None:
    path = _suite(tmp_path, tuning=None)
    suite = yaml.safe_load(path.read_text())
    del suite["methods"]["fedrep"]["search"]
    path.write_text(yaml.safe_dump(suite))
    out = tmp_path / "out"
    main(["compare", "-c", str(path), "--seeds", "1"])
    assert sorted(p.parent.name for p in (out / "runs").rglob("result.json")) == ["seed1", "seed1"]
    assert {row["n"] for row in _table(out).values()} == {"1"}
    covers = "2 of 4 runs (methods fedavg, fedrep of ['fedavg', 'fedrep']; seeds 1 of [0, 1])"
    assert f"- covers: `{covers}`" in (out / "table.md").read_text()
    assert "# covers: 2 of 4 runs" in (out / "table.csv").read_text()
    before = _stamps(out)
    main(["compare", "-c", str(path), "--methods", "fedrep"])
    assert sorted(p.parent.parent.name for p in (out / "runs").rglob("result.json")) == ["fedavg", "fedrep", "fedrep"]
    main(["compare", "-c", str(path)])  # the rest of the suite: fedavg's seed 0 runs, the others are kept
    after = _stamps(out)
    assert {p: after[p] for p in before} == before
    assert sorted(p.parent.name for p in after) == ["seed0", "seed0", "seed1", "seed1"]
    assert {row["n"] for row in _table(out).values()} == {"2"}
    assert "covers" not in (out / "table.md").read_text()


@pytest.mark.slow
@pytest.mark.distributed
def test_two_compares_of_one_suite_share_its_runs_and_each_writes_the_whole_table(tmp_path: Path) -> None:
    path = _suite(tmp_path, tuning=None, workers=1)
    suite = yaml.safe_load(path.read_text())
    del suite["methods"]["fedrep"]["search"]
    path.write_text(yaml.safe_dump(suite))
    command = [sys.executable, "-m", "fedhet", "compare", "-c", str(path)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in "ab"]
    logs = [process.communicate(timeout=900)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], logs
    out = tmp_path / "out"
    runs = sorted(run for run in (out / "runs").glob("digits/*/seed*") if run.is_dir())
    assert len(runs) == 4
    for run in runs:  # each run ran once, in one of the two processes: one fit version and one test version
        assert sorted(version.name for version in run.glob("version_*")) == ["version_0", "version_1"], run
    assert {row["n"] for row in _table(out).values()} == {"2"}
    assert "covers" not in (out / "table.md").read_text()


@pytest.mark.slow
@pytest.mark.distributed
def test_a_table_does_not_depend_on_workers(tmp_path: Path) -> None:
    """The smoke suite, tuning included, with 1 and 2 runs at once: every run on the suite's 1 thread, and every
    metric of every run and every cell of the table the same, to the bit (the cost columns aside: times)."""
    tables, metrics = {}, {}
    for workers in (1, 2):
        path = _suite(tmp_path / f"w{workers}", workers=workers)
        main(["compare", "-c", str(path)])
        out = tmp_path / f"w{workers}" / "out"
        configs = sorted(out.rglob("version_0/config.yaml"))
        assert len(configs) == 7  # 3 tuning trials and 4 final runs
        assert {yaml.safe_load(c.read_text())["trainer"]["processes"]["threads"] for c in configs} == {1}
        tables[workers] = {
            (key, column): cell
            for key, row in _table(out).items()
            for column, cell in row.items()
            if not any(cost in column for cost in ("cpu", "wall", "time", "startup"))
        }
        metrics[workers] = {
            str(result.relative_to(out)): (run["test"], run["val"])
            for result in sorted(out.rglob("result.json"))
            for run in [json.loads(result.read_text())]
        }
    assert len(metrics[1]) == 4
    assert metrics[1] == metrics[2]
    differing = [cell for cell in tables[1] if tables[1][cell] != tables[2].get(cell)]
    assert len(tables[1]) > 20
    assert differing == []


def test_threads_default_to_one_and_change_the_runs_digests_only_when_set(tmp_path: Path) -> None:
    one = load_suite(_suite(tmp_path / "one"))
    assert one.threads == 1
    assert run_spec(one, "digits", "fedavg", 0, {}).threads == 1
    four = load_suite(_suite(tmp_path / "one", threads=4))
    spec = run_spec(four, "digits", "fedavg", 0, {})
    assert spec.threads == 4
    assert "--trainer.processes.threads=4" in arguments(spec, "fit")
    assert method_sha256(four, "digits", "fedrep") != method_sha256(one, "digits", "fedrep")
    assert run_sha256(spec) != run_sha256(run_spec(one, "digits", "fedavg", 0, {}))


def test_suite_runs_draw_no_accuracy_plot(tmp_path: Path) -> None:
    """A suite's fit and test skip ``plots/accuracy.png`` (the suite draws its own plots)."""
    spec = run_spec(load_suite(_suite(tmp_path)), "digits", "fedavg", 0, {})
    for subcommand in ("fit", "test"):
        assert "--trainer.reporting.accuracy_plot=false" in arguments(spec, subcommand)


@pytest.mark.parametrize(
    ("flag", "values", "problem"),
    [
        ("--seeds", ["0", "7"], "[7] not among the suite's seeds [0, 1]"),
        ("--methods", ["fedrep", "flic"], "['flic'] not among the suite's methods ['fedavg', 'fedrep']"),
    ],
)
def test_an_unknown_seed_or_method_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, values: list[str], problem: str
) -> None:
    path = _suite(tmp_path)
    err = _exit_2(path, capsys, flag, *values)
    assert err == f"fedhet compare: error: suite file '{path}': {flag}: {problem}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"baseline": "fedprox"}, "baseline"),
        ({"colour": 1}, "the file"),
        ({"tuning": {"trials": 3, "seeds": [1]}}, "tuning.seeds"),
        ({"tuning": {"trials": 3, "random_trials": 0}}, "tuning.random_trials"),
        ({"federations": {"x": "missing.yaml"}}, "federations.x"),
        ({"results": ["a"]}, "results"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_suite_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, object], field: str
) -> None:
    path = _suite(tmp_path, **changes)
    err = _exit_2(path, capsys)
    assert len(err.splitlines()) == 1
    assert err.startswith(f"fedhet compare: error: suite file '{path}': {field}:")
    assert not (tmp_path / "out").exists()


def test_results_folder_is_relative_to_the_suite_file_and_defaults_to_output(tmp_path: Path) -> None:
    (tmp_path / "suites").mkdir()
    default = load_suite(_suite(tmp_path / "suites"))
    assert default.results_folder == default.output == tmp_path / "suites" / "out"
    (tmp_path / "elsewhere").mkdir()
    moved = load_suite(_suite(tmp_path / "elsewhere", results="../results/smoke"))
    assert moved.results_folder == tmp_path / "results" / "smoke"
    assert moved.output == tmp_path / "elsewhere" / "out"


def test_paired_wilcoxon_from_six_seeds() -> None:
    """Six seeds all above the baseline: the exact signed-rank p is 2 / 2**6; five seeds give none."""
    base = [{"seed": s, "test": {"test/acc_mean": 0.5}} for s in range(6)]
    method = [{"seed": s, "test": {"test/acc_mean": 0.5 + 0.01 * (s + 1)}} for s in range(6)]
    six = paired(method, base, "test/acc_mean")
    assert six["wilcoxon_p"] == pytest.approx(2 / 2**6)
    assert six["diff"] == pytest.approx(0.035)
    assert math.isnan(paired(method[:5], base, "test/acc_mean")["wilcoxon_p"])


def test_a_tuned_value_at_the_end_of_its_range_is_marked_in_the_table(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path))  # fedrep searches lr over 0.01-0.3 on a log scale
    key = "model.init_args.lr"
    tuned = {"digits/fedrep": {key: 0.28}, "digits/fedavg": {key: 0.28}}  # fedavg has no search space
    assert tuned_at_edges(suite, tuned) == {"digits/fedrep": {key: "high"}}
    assert tuned_at_edges(suite, {"digits/fedrep": {key: 0.05}}) == {}
    results = [{"federation": "digits", "method": "fedrep", "seed": 0, "test": {"test/acc_mean": 0.9}, "cpu_s": 1.0}]
    results[0].update(rounds=1, bytes_per_round=0.0)
    (row,) = table_rows(results, "acc", "fedavg", tuned, tuned_at_edges(suite, tuned))
    assert row["tuned"] == f"{key}=0.28 (high end of range)"


@pytest.mark.slow
@pytest.mark.distributed
def test_a_diverging_trial_scores_worst_and_the_suite_goes_on(tmp_path: Path) -> None:
    """FedRep's learning rate drawn from {0.1, 1e30}: the 1e30 trials' fits diverge (exit 3), the suite runs on."""
    path = _suite(tmp_path, seeds=[0], tuning={"trials": 3, "seeds": [100], "metric": "val/acc_mean"})
    spec = yaml.safe_load(path.read_text())
    spec["methods"]["fedrep"]["search"] = {"model.init_args.lr": {"type": "categorical", "choices": [0.1, 1.0e30]}}
    path.write_text(yaml.safe_dump(spec))
    main(["compare", "-c", str(path)])
    out = tmp_path / "out"
    assert yaml.safe_load((out / "tuned.yaml").read_text())["digits/fedrep"] == {"model.init_args.lr": 0.1}
    logs = [p.read_text() for p in (out / "tuning" / "digits" / "fedrep").glob("*/trial*/seed100/fit.log")]
    assert len(logs) == 3
    assert any("clients failed" in log and "non-finite upload" in log for log in logs)  # 1e30 was drawn
    name = f"smoke/digits/fedrep/{method_sha256(load_suite(path), 'digits', 'fedrep')[:12]}"
    study = optuna.load_study(study_name=name, storage=open_storage(str(out / "tuning.log")))
    values = {t.number: (t.params["model.init_args.lr"], t.value, t.state.name) for t in study.trials}
    assert {lr for lr, _, _ in values.values()} == {0.1, 1.0e30}
    for lr, value, state in values.values():
        assert state == "COMPLETE"
        assert (value == -math.inf) == (lr == 1.0e30)
    assert _table(out)[("digits", "fedrep")]["n"] == "1"


def test_a_method_digest_follows_its_inputs_not_its_paths(tmp_path: Path) -> None:
    here = load_suite(_suite(tmp_path / "a"))
    moved = load_suite(_suite(tmp_path / "b"))  # another output folder and tuning storage
    assert method_sha256(here, "digits", "fedrep") == method_sha256(moved, "digits", "fedrep")
    assert method_sha256(here, "digits", "fedrep") != method_sha256(here, "digits", "fedavg")
    fewer = load_suite(_suite(tmp_path / "c", tuning={"trials": 2, "seeds": [100], "metric": "val/acc_mean"}))
    assert method_sha256(fewer, "digits", "fedrep") != method_sha256(here, "digits", "fedrep")
    assert method_sha256(fewer, "digits", "fedavg") == method_sha256(here, "digits", "fedavg")  # nothing to tune
    tpe = load_suite(_suite(tmp_path / "d", tuning={"trials": 3, "seeds": [100], "random_trials": 2}))
    assert tpe.tuning is not None
    assert tpe.tuning.random_trials == 2
    assert method_sha256(tpe, "digits", "fedrep") != method_sha256(here, "digits", "fedrep")


def test_the_suite_sets_tpe_start_up_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_tune(*args: object, **kwargs: object) -> SimpleNamespace:
        seen.update(kwargs)
        return SimpleNamespace(best_overrides={"model.init_args.lr": 0.1})

    monkeypatch.setattr("fedhet.experiments.tuning.tune", fake_tune)
    suite = load_suite(_suite(tmp_path / "a", tuning={"trials": 6, "seeds": [100], "random_trials": 3}))
    assert tune_method(suite, "digits", "fedrep") == {"model.init_args.lr": 0.1}
    assert seen == {"random_trials": 3, "warmup_rounds": 1, "sampler": "tpe"}
    seen.clear()
    tune_method(load_suite(_suite(tmp_path / "b")), "digits", "fedrep")
    assert seen == {"random_trials": 10, "warmup_rounds": 1, "sampler": "tpe"}  # Optuna's default


SHIPPED_SUITES = sorted([*SMOKE.parent.glob("*.yaml"), *(SMOKE.parents[2] / "benchmarks" / "suites").glob("*.yaml")])


@pytest.mark.parametrize("path", SHIPPED_SUITES, ids=lambda p: f"{p.parents[1].name}/{p.stem}")
def test_every_shipped_suite_loads_and_sets_only_arguments_its_models_take(path: Path) -> None:
    """A typo in a shipped suite (a missing config, ``atom_sise``) fails here, not hours into its first run."""
    suite = load_suite(path)
    assert suite.name == path.stem
    for name, method in suite.methods.items():
        keys = [*method.overrides, *(method.search.params if method.search else ())]
        model = yaml.safe_load(Path(method.config).read_text())["model"]["class_path"]
        module, _, attr = model.rpartition(".")
        accepted = _init_arguments(getattr(importlib.import_module(module), attr))
        for key in keys:
            if key.startswith("model.init_args."):
                argument = key.removeprefix("model.init_args.").split(".")[0]
                assert argument in accepted, f"{path.name}: {name} sets {key}, which {model} does not take"


def _init_arguments(cls: type) -> set[str]:
    """The keyword arguments ``cls(...)`` takes, following ``**kwargs`` up the MRO as jsonargparse does."""
    accepted: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(klass.__init__).parameters.values()
        accepted |= {p.name for p in parameters if p.kind is not inspect.Parameter.VAR_KEYWORD}
        if all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters):
            return accepted
    raise AssertionError(f"{cls.__name__} passes **kwargs to every base class")


def test_a_command_line_fedhet_fit_refuses_stops_the_suite_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt override and a search range of the wrong type: one line naming both, exit 2, nothing run."""
    suite = yaml.safe_load(_suite(tmp_path).read_text())
    suite["methods"]["fedavg"]["overrides"]["model.init_args.finetune_epoch"] = 1
    suite["methods"]["fedrep"]["search"]["trainer.rounds"] = {"type": "float", "low": 1.5, "high": 2.0}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    err = _exit_2(path, capsys)
    assert len(err.splitlines()) == 1
    assert err.startswith(f"fedhet compare: error: suite file '{path}': methods: fedhet fit refuses ")
    assert "fedavg on digits: model.init_args.finetune_epoch: fedhet.modules.FedAvg has no such option" in err
    assert "fedrep on digits: trainer.rounds: expected an int, got '1.5'" in err
    assert not (tmp_path / "out").exists()  # no run, no tuning trial, no folder


def test_command_lines_are_checked_with_both_ends_of_every_range_and_the_tuned_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the check parses: each searched method at its ranges' ends, the others with their tuned values."""
    suite = load_suite(_suite(tmp_path))  # fedrep searches lr over 0.01-0.3; fedavg has no search space
    seen: list[list[str]] = []
    monkeypatch.setattr("fedhet.experiments.preflight.check_commands", lambda c, m: seen.extend(c) or [None] * len(c))
    check_command_lines(suite, [("digits", "fedavg"), ("digits", "fedrep")], {"digits/fedavg": {"trainer.rounds": 5}})
    assert [a[0] for a in seen] == ["fit"] * 3
    assert "--trainer.rounds=5" in seen[0]
    assert [[a for a in args if a.startswith("--model.init_args.lr=")] for args in seen[1:]] == [
        ["--model.init_args.lr=0.01"],
        ["--model.init_args.lr=0.3"],
    ]
    monkeypatch.setattr("fedhet.experiments.preflight.check_commands", lambda c, m: ["x: no such option"] * len(c))
    with pytest.raises(SuiteError, match=r"methods: fedhet fit refuses fedavg on digits: x: no such option; fedrep"):
        check_command_lines(suite, [("digits", "fedavg"), ("digits", "fedrep")], {})


def test_each_finished_run_is_a_line_in_a_redirected_log_before_the_next_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a terminal (pytest captures standard output): plain lines, printed as each run ends, with the tally."""
    from fedhet.experiments import compare as compare_module

    log: list[str] = []

    def fake_execute(spec: object, wait: bool = False) -> dict[str, object]:
        deadline = time.monotonic() + 30
        while len(log) < fake_execute.runs and time.monotonic() < deadline:  # type: ignore[attr-defined]
            log.extend(capsys.readouterr().out.splitlines())  # the earlier runs' lines, printed while the suite runs
            time.sleep(0.01)
        fake_execute.runs += 1  # type: ignore[attr-defined]
        return {"cpu_s": 1.25, "test": {"test/acc_mean": 0.5}}

    fake_execute.runs = 0  # type: ignore[attr-defined]
    monkeypatch.setattr(compare_module, "execute", fake_execute)
    monkeypatch.setattr(compare_module, "check_command_lines", lambda *args: None)
    monkeypatch.setattr(compare_module, "write_results", lambda *args, **kwargs: [])
    monkeypatch.setattr(compare_module, "summarise_on_wandb", lambda *args: None)
    path = _suite(tmp_path, workers=1, tuning=None)
    spec = yaml.safe_load(path.read_text())
    del spec["methods"]["fedrep"]["search"]
    path.write_text(yaml.safe_dump(spec))
    main(["compare", "-c", str(path)])
    assert len(log) == 3  # each line was in the log before the next run started
    log.extend(capsys.readouterr().out.splitlines())
    assert re.fullmatch(
        r"\[runs 1 done, 3 to do; 0:00:\d\d\] ran fedavg on digits, seed 0: 1.2 CPU s, test/acc_mean 0.5", log[0]
    )
    assert [line.split(";")[0] for line in log[:4]] == [f"[runs {k} done, {4 - k} to do" for k in range(1, 5)]
    assert log[3].endswith("] ran fedrep on digits, seed 1: 1.2 CPU s, test/acc_mean 0.5")
