"""A client's trained model as its LightningModule and as a Lightning checkpoint; mismatched modules are refused."""

import json
import sys
from pathlib import Path

import pytest
import torch

from fedhet.cli import main
from fedhet.modules import FedAvg, FedRep
from fedhet.plugins import FederatedTrainer, Processes, Reporting
from tests.conftest import plain_trainer

FEDAVG = str(Path(__file__).parents[2] / "configs" / "fedavg" / "digits.yaml")


def fitted(tmp_path, module, federation, rounds=2):
    trainer = FederatedTrainer(
        rounds=rounds,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        default_root_dir=tmp_path,
    )
    trainer.fit(module, federation)
    return trainer


@pytest.mark.parametrize("module_cls", [FedAvg, FedRep])
def test_client_module_scores_what_the_federation_scored(tmp_path, tiny_federation, module_cls):
    trainer = fitted(tmp_path, module_cls(hidden_dims=[8]), tiny_federation)
    federated = trainer.test(module_cls(hidden_dims=[8]), tiny_federation)
    for cid in ("a", "c"):
        module = trainer.client_module(cid)
        assert isinstance(module, module_cls)
        assert module.client_spec.client_id == cid
        (plain,) = plain_trainer().test(module, tiny_federation.client(cid), verbose=False)
        assert plain["test/acc"] == pytest.approx(federated[f"test/acc/{cid}"], abs=1e-6)


def test_personal_heads_differ_between_clients(tmp_path, tiny_federation):
    trainer = fitted(tmp_path, FedRep(hidden_dims=[8]), tiny_federation)
    a, c = trainer.client_module("a"), trainer.client_module("c")
    torch.testing.assert_close(a.body.state_dict(), c.body.state_dict())  # the shared body
    assert not torch.equal(a.head.weight, c.head.weight)


def test_exported_client_loads_with_lightning(tmp_path, tiny_federation):
    trainer = fitted(tmp_path, FedRep(hidden_dims=[8], head_epochs=2), tiny_federation)
    path = trainer.export_client("b", tmp_path / "b.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    assert {"state_dict", "hyper_parameters", "pytorch-lightning_version"} <= checkpoint.keys()
    restored = FedRep.load_from_checkpoint(path)
    assert restored.hparams.head_epochs == 2
    assert restored.client_spec == tiny_federation.specs["b"]
    torch.testing.assert_close(restored.state_dict(), trainer.client_module("b").state_dict())
    (plain,) = plain_trainer().test(restored, tiny_federation.client("b"), verbose=False)
    assert 0.0 <= plain["test/acc"] <= 1.0
    with pytest.raises(KeyError, match="client 'z' is not in this federation"):
        trainer.client_module("z")


def test_a_module_that_does_not_fit_the_checkpoint_is_refused_in_one_message(tmp_path, tiny_federation):
    fitted(tmp_path, FedRep(hidden_dims=[8]), tiny_federation)
    tester = FederatedTrainer(
        processes=Processes(accelerator="cpu"), reporting=Reporting(progress_bar=False), default_root_dir=tmp_path
    )
    message = r"was written by another run: hyperparameter 'hidden_dims' \[8\] \(checkpoint\) vs \[16\] \(this run\)$"
    with pytest.raises(ValueError, match=message):  # the run fingerprint, before any client is evaluated
        tester.test(FedRep(hidden_dims=[16]), tiny_federation, ckpt_path="last")
    with pytest.raises(
        ValueError, match=r"was written by another run: module class .*FedRep \(checkpoint\) vs .*FedAvg"
    ):
        tester.test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last")


def test_fedhet_export_writes_every_client_beside_its_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    args = ["-c", FEDAVG, "--data.init_args.num_clients", "3", "--trainer.rounds", "1"]
    args += ["--trainer.reporting.progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)]
    main(["fit", *args])
    main(["export", *args, "--ckpt_path", "last"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["version_0"]  # no new version: beside the run it exports
    clients = tmp_path / "version_0" / "clients"
    index = json.loads((clients / "index.json").read_text())
    assert len(index) == 3
    assert "exported 3 clients" in capsys.readouterr().out
    for cid, name in index.items():
        module = FedAvg.load_from_checkpoint(clients / name)
        assert module.client_spec.client_id == cid
        assert module.hparams.hidden_dims == [64]
