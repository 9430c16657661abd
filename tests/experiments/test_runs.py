"""A suite run's fit and test in one process: the folders and metrics of the two commands alone; failures named."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedhet.core.provenance import file_sha256 as sha256_file
from fedhet.core.provenance import source_tree
from fedhet.experiments.runs import (
    INPUTS_FILE,
    RunHeldError,
    RunSpec,
    command,
    current_result,
    execute,
    inputs_sha256,
    is_current,
    named_configs,
    run_command,
    run_sha256,
)

FEDAVG = Path(__file__).resolve().parents[2] / "configs" / "fedavg" / "digits.yaml"


def _spec(folder: Path, **changes: object) -> RunSpec:
    spec = RunSpec(
        federation="digits",
        method="fedavg",
        seed=3,
        configs=(FEDAVG,),
        overrides={"trainer.rounds": 1},
        folder=folder,
        threads=1,
    )
    return RunSpec(**{**spec.__dict__, **changes})


def _test_rows(version: Path) -> list[dict[str, str]]:
    with (version / "metrics.csv").open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if any(k.startswith("test/") and v for k, v in row.items())]


@pytest.mark.slow
def test_fit_and_test_in_one_process_match_the_test_command_alone(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "run")
    assert run_command(spec)[1:3] == ["-m", "fedhet.experiments.fit_test"]
    result = execute(spec)
    assert (result["fit_version"], result["test_version"]) == ("version_0", "version_1")
    assert json.loads((spec.folder / "result.json").read_text()) == result
    assert (spec.folder / "version_0" / "config.yaml").is_file()
    assert (spec.folder / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert "Traceback" not in (spec.folder / "fit.log").read_text() + (spec.folder / "test.log").read_text()
    # the same test as its own `fedhet test` process, on the same checkpoint: the same metrics, in version_2
    subprocess.run(command(spec, "test"), check=True, capture_output=True)
    together, alone = _test_rows(spec.folder / "version_1"), _test_rows(spec.folder / "version_2")
    assert together == alone
    assert float(together[0]["test/acc_mean"]) == pytest.approx(result["test"]["test/acc_mean"])
    # the run record: the commands' provenance, threads and CPU seconds by part (issue 39, item 2)
    tree = source_tree()
    assert result["commit"] == tree.commit + ("+dirty" if tree.dirty else "")
    assert result["threads"] == spec.threads == 1
    assert result["environment"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert set(result["cpu"]) == {"startup", "rounds", "evaluation"}
    assert all(value > 0 for value in result["cpu"].values())
    assert sum(result["cpu"].values()) <= result["cpu_s"]  # the process's parts; cpu_s also counts its children
    assert "fedhet.plugins.rounds.trainer" in result["sources"]
    assert result["user_code"] == {}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("changes", "failing"),
    [
        ({"overrides": {"trainer.rounds": 0}}, "fit"),  # refused when the fit starts
        ({"extra_fit_args": ("--trainer.checkpointing.every=0",)}, "test"),  # no checkpoint for the test to load
        ({"overrides": {"trainer.rounds": 1, "trainer.logger": False}, "test": False}, None),  # no metrics.csv
    ],
)
def test_a_failure_names_the_command_and_its_log(
    tmp_path: Path, changes: dict[str, object], failing: str | None
) -> None:
    spec = _spec(tmp_path / "run", **changes)
    message = (
        re.escape("holds no metrics.csv (trainer.logger: false") if failing is None else f"^fedhet {failing} failed in "
    )
    with pytest.raises(RuntimeError, match=message) as error:
        execute(spec)
    if failing is not None:
        assert str(error.value).endswith(f"; log: {spec.folder / f'{failing}.log'}")
    assert not (spec.folder / "result.json").exists()
    assert (spec.folder / "test.log").exists() == (failing == "test")


@pytest.mark.slow
def test_a_stopped_run_resumes_from_its_checkpoint_with_the_result_of_an_unstopped_one(tmp_path: Path) -> None:
    """A fit stopped after round 1 of 3 (its checkpoint holds round 1) goes on in its version folder: same result."""
    whole = execute(_spec(tmp_path / "whole", overrides={"trainer.rounds": 3}))
    stopped = _spec(tmp_path / "stopped", overrides={"trainer.rounds": 3})
    first = _spec(stopped.folder, overrides={"trainer.rounds": 1}, test=False)  # what a kill after round 1 leaves:
    execute(first)
    (stopped.folder / INPUTS_FILE).write_text(run_sha256(stopped))  # its checkpoint, in a folder of its inputs
    assert not (stopped.folder / "result.json").exists()
    resumed = execute(stopped)
    assert resumed["resumed_from_round"] == 1
    assert whole["resumed_from_round"] == 0
    assert (resumed["fit_version"], resumed["test_version"]) == ("version_0", "version_1")
    assert resumed["rounds"] == whole["rounds"] == 3
    assert resumed["test"] == whole["test"]  # bit for bit: the per-client metrics too
    assert resumed["val"] == whole["val"]


@pytest.mark.slow
def test_an_unreadable_checkpoint_is_set_aside_and_the_run_starts_again(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "run")
    execute(_spec(spec.folder, test=False))
    ckpt = spec.folder / "version_0" / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # truncated, as a full disk might leave it
    result = execute(spec)
    assert result["resumed_from_round"] == 0
    assert (result["fit_version"], result["test_version"]) == ("version_1", "version_2")
    assert (ckpt.parent / "last.ckpt.unreadable").is_file()


@pytest.mark.slow
def test_a_run_folder_left_by_other_inputs_is_moved_aside_and_run_again(tmp_path: Path) -> None:
    """A finished run, then the same folder with 2 rounds: the 1-round run is kept aside, not resumed nor reused."""
    old, new = _spec(tmp_path / "run"), _spec(tmp_path / "run", overrides={"trainer.rounds": 2})
    assert execute(old)["rounds"] == 1
    assert current_result(old) is not None
    assert current_result(new) is None
    result = execute(new)
    assert (result["rounds"], result["resumed_from_round"], result["fit_version"]) == (2, 0, "version_0")
    assert current_result(new) == result
    kept = json.loads((tmp_path / "run.stale1" / "result.json").read_text())
    assert kept["rounds"] == 1
    assert kept["inputs_sha256"] == run_sha256(old)


def test_a_result_is_current_only_for_the_inputs_that_made_it(tmp_path: Path) -> None:
    config = tmp_path / "method.yaml"
    config.write_text(FEDAVG.read_text())
    spec = _spec(tmp_path / "run", configs=(config,))
    result = {"overrides": {"trainer.rounds": 1}, "inputs_sha256": run_sha256(spec)}
    assert is_current(result, spec)
    assert not is_current(result, _spec(spec.folder, configs=(config,), seed=4))
    assert not is_current(result, _spec(spec.folder, configs=(config,), tags={"method_sha256": "other"}))
    config.write_text(config.read_text() + "\n# edited\n")  # the config's bytes are part of the inputs
    assert not is_current(result, spec)
    legacy = {"overrides": {"trainer.rounds": 1}}  # written before inputs_sha256: matched on its overrides
    assert is_current(legacy, spec)
    assert not is_current(legacy, _spec(spec.folder, overrides={"trainer.rounds": 2}))


def test_config_files_named_in_a_config_count_with_their_bytes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # named paths are read as `fedhet fit` reads them: from the working directory
    Path("step1.yaml").write_text("trainer: {rounds: 2}\nmodel: {init_args: {settings: extra.yml}}\n")
    Path("extra.yml").write_text("lr: 0.1\n")
    Path("step2.yaml").write_text("model: {init_args: {encoder_config: step1.yaml, other: step2.yaml}}\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("model: {init_args: {name: not_a_file.yaml, lr: 0.1}}\n")
    assert named_configs([Path("step2.yaml")]) == [Path("step1.yaml"), Path("extra.yml")]  # in turn, each once
    assert named_configs([plain]) == []
    Path("broken.yaml").write_text("model: [unclosed\n")
    Path("names_broken.yaml").write_text("model: {init_args: {encoder_config: broken.yaml}}\n")
    assert named_configs([Path("names_broken.yaml")]) == [Path("broken.yaml")]  # its bytes count; not read further
    assert named_configs([plain], {"overrides": {"model.init_args.encoder_config": "step1.yaml"}}) == [
        Path("step1.yaml"),
        Path("extra.yml"),
    ]
    spec = _spec(tmp_path / "run", configs=(Path("step2.yaml"),))
    before = run_sha256(spec)
    Path("extra.yml").write_text("lr: 0.2\n")  # an edit two files away changes the run's inputs
    assert run_sha256(spec) != before
    # a config naming no other file keeps the digest it had before named files were hashed
    payload = {"configs": [sha256_file(plain)], "overrides": {"a": 1}}
    assert (
        inputs_sha256([plain], overrides={"a": 1})
        == hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    )


def test_user_code_a_config_names_by_class_path_counts_in_a_runs_inputs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # user packages are found as `python -m fedhet fit` imports them: the working directory
    Path("mydata").mkdir()
    Path("mydata/__init__.py").write_text("")
    Path("mydata/sites.py").write_text("from mydata.helpers import scale\n")
    Path("mydata/helpers.py").write_text("def scale(x):\n    return x\n")
    Path("data.yaml").write_text("data: {class_path: mydata.sites.SiteFederation}\n")
    spec = _spec(tmp_path / "run", configs=(FEDAVG, Path("data.yaml")))
    before = run_sha256(spec)
    assert run_sha256(spec) == before
    Path("mydata/helpers.py").write_text("def scale(x):\n    return 2 * x\n")  # not named, but imported by the data
    assert run_sha256(spec) != before
    # configs that name no user code keep the digest they had before user code counted
    payload = {"configs": [sha256_file(FEDAVG)], "overrides": {"trainer.rounds": 1}, "seed": 3, "tags": {}}
    expected = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    assert run_sha256(_spec(tmp_path / "run")) == expected


def test_a_run_another_process_holds_is_refused_or_waited_for_and_never_run_twice(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "run")
    lock = spec.folder.with_name(".run.lock")
    holder = subprocess.Popen(  # another process running the run: it holds the run's lock for a few seconds
        [
            sys.executable,
            "-c",
            f"import filelock, time; held = filelock.FileLock({str(lock)!r}); held.acquire(); print(1, flush=True)"
            "; time.sleep(4)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "1\n"
        with pytest.raises(RunHeldError, match="is being run by another process"):
            execute(spec)
        spec.folder.mkdir()
        finished = {"overrides": {"trainer.rounds": 1}, "inputs_sha256": run_sha256(spec), "test": {"acc": 0.5}}
        (spec.folder / "result.json").write_text(json.dumps(finished))  # what the other process leaves when done
        assert execute(spec, wait=True) == finished  # waited for the holder, then took its result
    finally:
        holder.kill()
        holder.wait()
    assert not list(spec.folder.glob("version_*"))  # nothing ran here
