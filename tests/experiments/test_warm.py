"""Warm run processes: runs forked from a warm server give the numbers of fresh processes; kills stay local."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedhet.experiments import warm
from fedhet.experiments.compare import run_spec
from fedhet.experiments.runs import RunSpec, execute, run_command
from fedhet.experiments.suite import load_suite
from tests.experiments.warm_children import threads_and_variable

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "suites" / "smoke.yaml"


def _metrics(version: Path) -> list[dict[str, str]]:
    """A version folder's metrics.csv rows without the ``time/...`` columns (wall-clock times differ run to run)."""
    with (version / "metrics.csv").open(newline="") as handle:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(handle)]


def _moved(spec: RunSpec, folder: Path) -> RunSpec:
    return RunSpec(**{**spec.__dict__, "folder": folder})


@pytest.mark.slow
def test_the_smoke_suite_runs_warm_as_in_fresh_processes(tmp_path: Path) -> None:
    """Every run of the smoke suite (both methods, both seeds; 1 thread each): fit and test metrics bit for bit."""
    suite = load_suite(SMOKE)
    runs = [(m, s) for m in suite.methods for s in suite.seeds]
    assert len(runs) == 4
    for method, seed in runs:
        spec = run_spec(suite, "digits", method, seed, {})
        warm_spec, fresh_spec = (_moved(spec, tmp_path / side / method / str(seed)) for side in ("warm", "fresh"))
        result = execute(warm_spec)
        fresh_spec.folder.mkdir(parents=True)
        subprocess.run(
            run_command(fresh_spec), check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
        for version in ("version_0", "version_1"):  # the fit's rounds, then the test
            assert _metrics(warm_spec.folder / version) == _metrics(fresh_spec.folder / version), (method, seed)
        assert result["cpu_s"] > 0


@pytest.mark.slow
def test_a_killed_run_loses_only_itself_and_resumes_to_the_numbers_of_an_unkilled_one(tmp_path: Path) -> None:
    spec = RunSpec(
        federation="digits",
        method="fedavg",
        seed=3,
        configs=(ROOT / "configs" / "fedavg" / "digits.yaml",),
        overrides={"trainer.rounds": 3},
        folder=tmp_path / "whole",
        threads=1,
    )
    whole = execute(spec)
    killed = _moved(spec, tmp_path / "killed")
    killer = RunSpec(
        **{
            **killed.__dict__,
            "extra_fit_args": ("--trainer.callbacks+=tests.experiments.warm_children.KillAfterRound",),
        }
    )
    with pytest.raises(RuntimeError, match=r"^fedhet fit failed in .*exit status -9"):
        execute(killer)  # its child killed after round 2 of 3: the checkpoint holds round 1
    assert not (killed.folder / "result.json").exists()
    resumed = execute(killed)  # the warm server still serves runs
    assert resumed["resumed_from_round"] == 1
    assert (resumed["val"], resumed["test"]) == (whole["val"], whole["test"])


def _pid_of(path: Path) -> int:
    deadline = time.monotonic() + 120
    while not path.is_file() or not path.read_text().strip():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    return int(path.read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").is_file() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_parent_leaves_no_child_running(tmp_path: Path) -> None:
    """``fedhet compare`` killed mid-run: its warm server ends, and the run's child with it (no run writes on)."""
    marker = tmp_path / "child.pid"
    code = (
        "from fedhet.experiments import warm; from tests.experiments import warm_children as w;"
        f" warm.call(w.sleep_forever, {str(marker)!r})"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
    )
    child = _pid_of(marker)
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 60
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_a_child_sets_its_threads_and_environment_and_returns_its_value() -> None:
    value, cpu = warm.call(threads_and_variable, threads=1, env={"FEDHET_WARM_TEST": "yes"})
    assert value == (1, "1", "yes")
    assert cpu >= 0
    with pytest.raises(warm.ChildExitError) as ended:
        warm.call(os._exit, 7)
    assert ended.value.status == 7
