"""FedDaDiL's two steps from one command: ``fedhet fit`` runs step 1 first when no checkpoint of it is found."""

import sys

import yaml

from fedhet.cli import main
from fedhet.plugins.storage.checkpoint import load_checkpoint
from fedhet.plugins.storage.versions import versions

DATA = {
    "class_path": "fedhet.datamodules.RotatedBlobsDomains",
    "init_args": {"samples_per_class": 24, "batch_size": 16},
}


def test_step_two_runs_step_one_first_reuses_it_and_reruns_it_once_edited(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    step1 = {
        "trainer": {"rounds": 2, "reporting": {"progress_bar": False}, "default_root_dir": str(tmp_path / "step1")},
        "model": {"class_path": "fedhet.modules.FedAvg", "init_args": {"hidden_dims": [8]}},
        "data": {**DATA, "init_args": {**DATA["init_args"], "include_target": False}},
    }
    (tmp_path / "step1.yaml").write_text(yaml.safe_dump(step1))
    settings = {"num_atoms": 2, "atom_size": 8, "batch_size": 8, "target": "theta45", "barycenter_iters": 3}
    step2 = {
        "trainer": {"rounds": 1, "reporting": {"progress_bar": False}, "default_root_dir": str(tmp_path / "step2")},
        "model": {
            "class_path": "fedhet.modules.FedDaDiL",
            "init_args": {**settings, "hidden_dims": [8], "encoder_config": str(tmp_path / "step1.yaml")},
        },
        "data": DATA,
    }
    (tmp_path / "step2.yaml").write_text(yaml.safe_dump(step2))
    main(["fit", "-c", str(tmp_path / "step2.yaml")])
    assert "has no checkpoint under" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "step1" / "version_0" / "checkpoints" / "last.ckpt").round == 2
    assert load_checkpoint(tmp_path / "step2" / "version_0" / "checkpoints" / "last.ckpt").round == 1
    main(["fit", "-c", str(tmp_path / "step2.yaml")])  # step 1's checkpoint is found: it does not run again
    assert "has no checkpoint under" not in capsys.readouterr().out
    assert versions(tmp_path / "step1") == [0]
    assert versions(tmp_path / "step2") == [0, 1]
    step1["trainer"]["rounds"] = 3  # an edited step 1: its old encoder is not reused
    (tmp_path / "step1.yaml").write_text(yaml.safe_dump(step1))
    main(["fit", "-c", str(tmp_path / "step2.yaml")])
    assert "no longer matches the config.yaml of the run" in capsys.readouterr().out
    assert versions(tmp_path / "step1") == [0, 1]
    assert load_checkpoint(tmp_path / "step1" / "version_1" / "checkpoints" / "last.ckpt").round == 3
    main(["fit", "-c", str(tmp_path / "step2.yaml")])  # the new one is
    assert "running it first" not in capsys.readouterr().out
    assert versions(tmp_path / "step1") == [0, 1]
    (tmp_path / "step1" / "version_1" / "config.yaml").write_text("- not: a config\n")  # unreadable: run again
    main(["fit", "-c", str(tmp_path / "step2.yaml")])
    assert "no longer matches the config.yaml of the run" in capsys.readouterr().out
    assert versions(tmp_path / "step1") == [0, 1, 2]
