"""Tuning storage that survives kills: a journal cut mid-record, and a dead trial whose owner's pid is reused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from fedhet.cli import main
from fedhet.experiments.journal import JournalDamagedError, repair_journal
from fedhet.experiments.search_space import SearchSpace
from fedhet.experiments.trial_owner import OWNER_ATTR, owner_alive, owner_token, process_start
from fedhet.experiments.tuning import tune

X = SearchSpace.parse({"x": {"type": "float", "low": 0.0, "high": 1.0}}, "test")
SMOKE = Path(__file__).resolve().parents[2] / "configs" / "suites" / "smoke.yaml"


def parabola(overrides: dict[str, float], handle: object) -> float:
    return -((overrides["x"] - 0.3) ** 2)


def _journal(storage: str) -> optuna.storages.JournalStorage:
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))


def _records(path: Path) -> list[dict[str, object]]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_a_journal_cut_mid_record_is_repaired_before_the_next_append(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = str(tmp_path / "study.log")
    tune("cut", X, parabola, n_trials=2, storage=storage, seed=0)
    whole = Path(storage).read_bytes()
    last = whole[:-1].rsplit(b"\n", 1)[1]
    Path(storage).write_bytes(whole + last[: len(last) // 2])  # a killed writer's half record
    result = tune("cut", X, parabola, n_trials=4, storage=storage, seed=0)
    assert [t.state for t in result.trials] == ["COMPLETE"] * 4
    assert len(_records(Path(storage))) > len(whole.splitlines())  # every line a record: readable for good
    study = optuna.load_study(study_name="cut", storage=_journal(storage))
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 4
    said = [r.getMessage() for r in caplog.records if "journal" in r.getMessage()]
    assert said == [
        f"tuning: journal '{storage}': dropped a partial last record of {len(last) // 2} bytes (a killed writer's)"
    ]


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "study.log"
    path.write_bytes(b'{"op_code": 0}\n{"op_code": 1}')
    assert (
        repair_journal(path)
        == f"tuning: journal '{path}': its last record lacked its newline (a killed writer's); completed it"
    )
    assert path.read_bytes() == b'{"op_code": 0}\n{"op_code": 1}\n'
    assert repair_journal(path) is None


def _damaged(storage: str) -> None:
    """A journal where a partial record was followed by a later append: the state Optuna cannot read again."""
    optuna.create_study(study_name="first", storage=_journal(storage))
    with open(storage, "ab") as journal:
        journal.write(b'{"op_code":5,"worker_id":"w","trial_id":0,"user_at')
    with pytest.raises(AssertionError):  # Optuna appends right after the partial record, then cannot read it back
        optuna.create_study(study_name="second", storage=_journal(storage))
    with pytest.raises(json.JSONDecodeError):  # and once a record follows the joined line, no read succeeds
        optuna.create_study(study_name="third", storage=_journal(storage))


def test_a_journal_damaged_before_its_last_line_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    storage = str(tmp_path / "study.log")
    _damaged(storage)
    with pytest.raises(JournalDamagedError, match=rf"^tuning: journal '{storage}' line 2 is not a JSON record"):
        tune("third", X, parabola, n_trials=1, storage=storage, seed=0)


def test_compare_with_a_damaged_journal_says_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = yaml.safe_load(SMOKE.read_text())
    for method in suite["methods"].values():
        method["config"] = str((SMOKE.parent / method["config"]).resolve())
    suite["output"] = str(tmp_path / "out")
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    (tmp_path / "out").mkdir()
    _damaged(str(tmp_path / "out" / "tuning.log"))
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "-c", str(path), "--methods", "fedrep", "--seeds", "0"])
    assert exit_info.value.code != 0
    err = str(exit_info.value.code) + capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"fedhet compare: error: tuning: journal '{tmp_path / 'out' / 'tuning.log'}' line 2 is not a JSON record (a"
        " process killed while writing it, then another record appended); delete that line, or the file to tune again"
        " from the start"
    ]


def test_a_dead_trial_whose_pid_another_process_now_holds_is_released(tmp_path: Path) -> None:
    """The trial's owner dies mid-trial; its pid then belongs to a live process (this one, standing in for a restarted
    container's entrypoint that always gets the same pid): the trial must stop counting."""
    storage = str(tmp_path / "study.log")
    script = (
        "import os\n"
        "from fedhet.experiments.search_space import SearchSpace\n"
        "from fedhet.experiments.tuning import tune\n"
        "space = SearchSpace.parse({'x': {'type': 'float', 'low': 0.0, 'high': 1.0}}, 'test')\n"
        f"tune('reused', space, lambda overrides, handle: os._exit(0), n_trials=3, storage={storage!r}, seed=0)\n"
    )
    subprocess.run(
        [sys.executable, "-c", script], check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    )
    study = optuna.load_study(study_name="reused", storage=_journal(storage))
    (orphan,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    host, dead_pid, *start = str(orphan.user_attrs[OWNER_ATTR]).split(":")
    reused = ":".join([host, str(os.getpid()), *start])  # the same owner, its pid now held by a live process
    assert dead_pid != str(os.getpid())
    storage_obj = study._storage
    storage_obj.set_trial_user_attr(orphan._trial_id, OWNER_ATTR, reused)
    result = tune("reused", X, parabola, n_trials=3, storage=storage, seed=0)
    assert [t.state for t in result.trials] == ["FAIL", "COMPLETE", "COMPLETE", "COMPLETE"]


def test_an_owner_token_names_the_process_by_pid_and_start_time() -> None:
    host = socket.gethostname()
    token = owner_token()
    assert token == f"{host}:{os.getpid()}:{process_start(os.getpid())}"
    assert owner_alive(token, host) is True
    assert owner_alive(f"{host}:{os.getpid()}:1", host) is False  # this pid, another start: another process
    assert owner_alive(f"{host}:{os.getpid()}", host) is True  # an older fedhet's token: the pid alone
    assert owner_alive(f"elsewhere:{os.getpid()}:1", host) is None  # another machine's process cannot be checked
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert owner_alive(f"{host}:{gone.pid}", host) is False
