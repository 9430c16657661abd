"""A table made from raw rows alone (issue 39, items 3 and 4): the header names the commits and environments of its
runs and says first when they are mixed; bad or missing raw files are refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fedhet.cli import main
from fedhet.experiments.raw import read_raw
from fedhet.experiments.report import stamp
from fedhet.experiments.results import table_rows

ENV = {"torch": "2.5.1", "torch_build": "a" * 40, "cpu_capability": "AVX2", "cpu": "EPYC", "python": "3.11", "os": "L"}


def _row(method: str, seed: int, commit: str = "c1", capability: str = "AVX2", **more: object) -> dict[str, object]:
    return {
        "federation": "f",
        "method": method,
        "seed": seed,
        "tuned": {},
        "test": {"test/acc_mean": 0.5 + 0.01 * seed},
        "val": [],
        "rounds": 4,
        "bytes_per_round": 1.0,
        "cpu_s": 10.0,
        "cpu": {"startup": 6.0, "rounds": 2.0, "evaluation": 1.0},
        "wall_s": 12.0,
        "commit": commit,
        "environment": {**ENV, "cpu_capability": capability},
        "threads": 1,
        "inputs_sha256": f"{seed}",
        **more,
    }


def test_one_commit_and_environment_are_named_and_nothing_is_said_mixed() -> None:
    rows = [_row("a", 0), _row("a", 1)]
    lines, meta = stamp("suites/s.yaml", rows, [])
    assert lines[0] == "- suite: `suites/s.yaml`"
    assert "- commit: `c1`" in lines
    assert any(line.startswith("- environment: `") and "AVX2 kernels, EPYC" in line for line in lines)
    assert (meta["commit"], len(meta["environment"])) == ("c1", 12)


def test_runs_of_several_commits_or_machines_say_so_first() -> None:
    rows = [_row("a", 0), _row("a", 1, commit="c2"), _row("b", 0, capability="AVX512")]
    lines, meta = stamp("s.yaml", rows, [])
    assert lines[0].startswith("**Mixed runs: 2 commits and 2 environments.**")
    assert "- commit: `mixed`" in lines
    assert "  - `c2` (1 run: a on f seed 1)" in lines
    assert meta["commit"] == meta["environment"] == "mixed"
    assert sum(line.startswith("- environment: ") for line in lines) == 2


def test_cost_columns_are_rounds_only_startup_wall_and_tuning_seconds() -> None:
    rows = [_row("a", 0), _row("a", 1, cpu={"startup": 4.0, "rounds": 4.0, "evaluation": 1.0}, resumed_from_round=2)]
    trials = [{"federation": "f", "method": "a", "cpu_s": 30.0}, {"federation": "f", "method": "a", "cpu_s": 20.0}]
    (row,) = table_rows(rows, "acc", "a", {}, trials=trials)
    assert row["cpu_s/round"] == pytest.approx((2.0 / 4 + 4.0 / 2) / 2)  # a resumed run: the rounds it trained
    assert (row["startup_s/run"], row["wall_s/run"]) == (5.0, 12.0)
    assert (row["tuning_cpu_s"], row["tuning_trials"]) == (50.0, 2)
    unknown = [{"federation": "f", "method": "a", "cpu_s": None}]  # runs and trials from before the run record
    (old,) = table_rows([{**r, "cpu": None} for r in rows], "acc", "a", {}, trials=unknown)
    assert all(math.isnan(old[k]) for k in ("cpu_s/round", "startup_s/run", "tuning_cpu_s"))  # not made up
    assert table_rows(rows, "acc", "a", {})[0]["tuning_cpu_s"] == 0  # an untuned method spent nothing tuning


def test_raw_files_are_read_back_and_a_bad_line_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no raw results"):
        read_raw(tmp_path)
    (tmp_path / "runs.jsonl").write_text(json.dumps(_row("a", 0)) + "\n" + json.dumps({"method": "a"}) + "\n")
    with pytest.raises(ValueError, match=r"runs.jsonl', line 2: field 'federation' is missing"):
        read_raw(tmp_path)
    (tmp_path / "runs.jsonl").write_text(json.dumps(_row("a", 0)) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"line 2: not valid JSON"):
        read_raw(tmp_path)


def test_report_without_raw_results_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: s\nfederations: {d: null}\nmethods: {a: {config: a.yaml}}\nseeds: [0]\nfew_seeds: a test\nbaseline: a\n"
    )
    (tmp_path / "a.yaml").write_text("model: {class_path: fedhet.modules.FedAvg}\n")
    with pytest.raises(SystemExit) as stopped:
        main(["compare", "-c", str(suite), "--report"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "runs.jsonl is missing" in err
