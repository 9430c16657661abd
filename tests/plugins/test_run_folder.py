"""Run version folders: a new run never overwrites an earlier one, ``last`` is the latest version, resumes stay put."""

import csv
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fedhet.cli import main
from fedhet.modules import FedAvg, FedRep
from fedhet.plugins import FederatedTrainer, Processes, Reporting
from fedhet.plugins.storage.checkpoint import load_checkpoint
from fedhet.plugins.storage.run_folder import claim_version, version_of
from fedhet.plugins.storage.versions import latest_checkpoint, versions
from tests.trainer_options import trainer_options

FEDAVG = str(Path(__file__).parents[2] / "configs" / "fedavg" / "digits.yaml")


def make_trainer(root, **kwargs):
    kwargs.setdefault("rounds", 2)
    return FederatedTrainer(
        **trainer_options(
            default_root_dir=str(root),
            processes=Processes(accelerator="cpu"),
            reporting=Reporting(progress_bar=False),
            **kwargs,
        )
    )


def rounds_logged(folder):
    with (folder / "metrics.csv").open(newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


def test_claims_are_distinct_even_when_concurrent(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(lambda _: claim_version(tmp_path), range(16)))
    assert sorted(claimed) == list(range(16))
    assert versions(tmp_path) == list(range(16))
    (tmp_path / "version_x").mkdir()  # not a version folder
    (tmp_path / "version_20").mkdir()
    assert claim_version(tmp_path) == 21


def test_latest_checkpoint_skips_versions_without_one(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    for version in (0, 1, 2):
        (tmp_path / f"version_{version}").mkdir()
    (tmp_path / "version_1" / "checkpoints").mkdir()
    last = tmp_path / "version_1" / "checkpoints" / "last.ckpt"
    last.write_bytes(b"")
    assert latest_checkpoint(tmp_path) == last
    assert version_of(last, tmp_path) == 1
    assert version_of(tmp_path / "elsewhere.ckpt", tmp_path) is None


def test_a_second_run_gets_its_own_folder_and_leaves_the_first_intact(tmp_path, tiny_federation):
    first = make_trainer(tmp_path)
    first.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    first_ckpt = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    before = first_ckpt.read_bytes()
    second = make_trainer(tmp_path, rounds=1)
    second.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert first.run_dir == tmp_path / "version_0"
    assert second.run_dir == tmp_path / "version_1"
    assert first_ckpt.read_bytes() == before
    assert load_checkpoint(tmp_path / "version_1" / "checkpoints" / "last.ckpt").round == 1
    assert rounds_logged(tmp_path / "version_0") == [0, 1]
    assert rounds_logged(tmp_path / "version_1") == [0]
    # 'last' is the latest version's checkpoint: the 1-round model, evaluated in a folder of its own
    tester = make_trainer(tmp_path)
    tester.test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert tester.run_dir == tmp_path / "version_2"
    assert rounds_logged(tmp_path / "version_2") == [1]


def test_resuming_goes_on_in_the_checkpoints_version(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    make_trainer(tmp_path, rounds=1).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    resumed = make_trainer(tmp_path, rounds=3)
    resumed.fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path=str(tmp_path / "version_0/checkpoints/last.ckpt"))
    assert resumed.run_dir == tmp_path / "version_0"
    assert versions(tmp_path) == [0, 1]
    assert rounds_logged(tmp_path / "version_0") == [0, 1, 2]
    assert load_checkpoint(tmp_path / "version_0" / "checkpoints" / "last.ckpt").round == 3
    assert load_checkpoint(tmp_path / "version_1" / "checkpoints" / "last.ckpt").round == 1


def test_spilled_client_states_live_in_the_run_folder(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=1, client_state_budget_mb=0.0)
    trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)  # personal heads: every state but one spills
    (folder,) = (tmp_path / "version_0" / "client_state").glob("*-rank0")
    assert any(folder.glob("*.pt"))
    assert not (tmp_path / "client_state").exists()


def test_testing_before_anything_was_trained_says_so(tmp_path, tiny_federation):
    with pytest.raises(FileNotFoundError, match="nothing was trained yet"):
        make_trainer(tmp_path).test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")


@pytest.mark.slow
def test_cli_runs_keep_config_checkpoints_and_logs_together(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    args = ["-c", FEDAVG, "--data.init_args.num_clients", "3"]
    args += ["--trainer.reporting.progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)]
    main(["fit", *args, "--trainer.rounds", "2"])
    main(["fit", *args, "--trainer.rounds", "1"])
    for version, rounds in ((0, 2), (1, 1)):
        folder = tmp_path / f"version_{version}"
        assert yaml.safe_load((folder / "config.yaml").read_text())["trainer"]["rounds"] == rounds
        assert load_checkpoint(folder / "checkpoints" / "last.ckpt").round == rounds
        assert len(rounds_logged(folder)) == rounds


def test_mistyped_options_are_not_prefix_matched(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", FEDAVG, "--trainer.round", "2", "--print_config"])
    assert exit_info.value.code == 2
    assert "--trainer.round" in capsys.readouterr().err
