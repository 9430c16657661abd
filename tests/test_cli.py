import csv
import importlib
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fedhet.callbacks import RichRoundProgress
from fedhet.cli import FederatedCLI, main
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedAvg
from fedhet.plugins import FederatedTrainer, Reporting, SequentialRunner, StackedRunner, UniformSampler

ROOT = Path(__file__).parents[1]
CONFIG_DIR = ROOT / "configs"
DATA_CONFIG_DIR = CONFIG_DIR / "data"  # federations alone (a `data:` section), given after a method's config
SUITE_DIR = CONFIG_DIR / "suites"  # fedhet compare suites, not fedhet fit configs
CONFIGS = sorted(path for path in CONFIG_DIR.rglob("*.yaml") if path.parent not in (DATA_CONFIG_DIR, SUITE_DIR))
FEDAVG = str(CONFIG_DIR / "fedavg" / "digits.yaml")


def import_object(class_path):
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def tiny(root, rounds=2):
    return [
        "--trainer.rounds",
        str(rounds),
        "--data.init_args.num_clients",
        "3",
        "--trainer.reporting.progress_bar",
        "false",
        "--trainer.default_root_dir",
        str(root),
    ]


def read_logs(root):
    """``{version directory name: rows of its metrics.csv}``, oldest version first."""
    paths = sorted(Path(root).glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
    logs = {}
    for path in paths:
        with path.open(newline="") as f:
            logs[path.parent.name] = list(csv.DictReader(f))
    return logs


def value(row, key):
    """A CSV cell as a float, or None when the row has no value for ``key``."""
    cell = row.get(key)
    return None if cell in (None, "") else float(cell)


@pytest.fixture(autouse=True)
def _clean_argv(monkeypatch):
    """LightningCLI warns when it is given ``args`` while ``sys.argv`` holds pytest's own arguments."""
    monkeypatch.setattr(sys, "argv", ["fedhet"])


@pytest.fixture
def no_data(monkeypatch):
    """Fail the test if any federation builds its clients (i.e. reads data)."""

    def refuse(self, stage=None):
        raise AssertionError(f"{type(self).__name__} read its data")

    monkeypatch.setattr(FederatedDataModule, "_build_and_check", refuse)


# ---------------------------------------------------------------------------------------------------- the configs
def test_configs_cover_every_baseline():
    names = {path.relative_to(CONFIG_DIR).as_posix() for path in CONFIGS}
    assert {"fedavg/digits.yaml", "fedavg_ft/digits.yaml", "fedrep/digits.yaml", "local/digits.yaml"} <= names


def test_digits_configs_share_data_and_trainer_settings():
    configs = {path.parent.name: yaml.safe_load(path.read_text()) for path in CONFIG_DIR.glob("*/digits.yaml")}
    reference = configs["fedavg"]
    for name, config in configs.items():
        assert config["data"] == reference["data"], name
        trainer = {k: v for k, v in config["trainer"].items() if k != "default_root_dir"}
        assert trainer == {k: v for k, v in reference["trainer"].items() if k != "default_root_dir"}, name
    roots = [config["trainer"]["default_root_dir"] for config in configs.values()]
    assert len(set(roots)) == len(roots), "two configs would write to the same run directory"


@pytest.mark.parametrize("path", CONFIGS, ids=[p.relative_to(CONFIG_DIR).as_posix() for p in CONFIGS])
def test_config_instantiates_the_classes_it_names(path, tmp_path, no_data):
    config = yaml.safe_load(path.read_text())
    cli = FederatedCLI(args=["-c", str(path), "--trainer.default_root_dir", str(tmp_path)], run=False)
    for section, obj in (("model", cli.model), ("data", cli.datamodule)):
        assert type(obj) is import_object(config[section]["class_path"])
        for name, expected in config[section].get("init_args", {}).items():
            assert obj.hparams[name] == expected, f"{section}.init_args.{name}"
    for name in ("rounds", "local_epochs", "seed", "eval_every"):
        if name in config.get("trainer", {}):
            assert getattr(cli.trainer, name) == config["trainer"][name], f"trainer.{name}"
    assert not any(tmp_path.iterdir()), "instantiating must not write anything"


def test_only_the_classes_a_config_names_save_its_arguments_as_hyperparameters(no_data):
    path = CONFIG_DIR / "gl" / "heart_fedavg.yaml"
    config = yaml.safe_load(path.read_text())
    cli = FederatedCLI(args=["-c", str(path)], run=False)
    for obj, section in ((cli.model, "model"), (cli.datamodule, "data")):
        assert obj.hparams["_class_path"] == config[section]["class_path"]  # load_from_checkpoint rebuilds from these
        assert obj.hparams["_instantiator"] == "lightning.pytorch.cli.instantiate_module"
    inner = cli.datamodule.federation
    assert "_class_path" not in inner.hparams
    assert inner.hparams["sites"] == ["cleveland", "saheart", "faisalabad"]
    assert "layout" not in inner.hparams  # the wrapper's argument, not the wrapped federation's


def test_fedavg_ft_and_fedrep_configs_set_their_method_knobs(no_data, tmp_path):
    ft = FederatedCLI(args=["-c", str(CONFIG_DIR / "fedavg_ft" / "digits.yaml")], run=False).model
    assert ft.finetune_epochs == 1
    assert [phase.epochs for phase in ft.adaptation_phases()] == [1]
    rep = FederatedCLI(args=["-c", str(CONFIG_DIR / "fedrep" / "digits.yaml")], run=False).model
    assert rep.local_phases()[0].epochs == rep.head_epochs >= 1
    local = FederatedCLI(args=["-c", str(CONFIG_DIR / "local" / "digits.yaml")], run=False).model
    assert local.shared == ()


def test_trainer_defaults_are_applied_under_the_config(no_data):
    persistent = RichRoundProgress(force=True)
    cli = FederatedCLI(
        args=["-c", FEDAVG, "--trainer.local_epochs", "2"],
        run=False,
        trainer_defaults={"reporting": {"eval_every": 3}, "rounds": 99, "local_epochs": 5, "callbacks": persistent},
    )
    assert cli.trainer.reporting.eval_every == 3  # not in the config: the default given to the CLI
    assert cli.trainer.rounds == 40  # the config file wins over trainer_defaults
    assert cli.trainer.local_epochs == 2  # and the command line over both
    assert cli.trainer.user_callbacks == [persistent]


def test_callbacks_added_to_the_parser_reach_the_trainer(no_data):
    class WithProgress(FederatedCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_lightning_class_args(RichRoundProgress, "progress")

    cli = WithProgress(args=["-c", FEDAVG, "--progress.force", "true"], run=False)
    (callback,) = cli.trainer.user_callbacks
    assert isinstance(callback, RichRoundProgress)
    assert callback.force is True


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--trainer.logger=TensorBoardLogger", "--trainer.logger.init_args.save_dir=tb"], "TensorBoardLogger"),
        (["--trainer.logger=CSVLogger", "--trainer.logger.init_args.save_dir=csv"], "CSVLogger"),
    ],
)
def test_a_logger_short_name_is_lightnings_logger(options, expected, no_data, tmp_path):
    if expected == "TensorBoardLogger":
        pytest.importorskip("tensorboard", reason="the tensorboard extra")
    import lightning.fabric.loggers as fabric_loggers
    import lightning.pytorch.loggers as lightning_loggers

    (logger,) = FederatedCLI(args=["-c", FEDAVG, *options], run=False).trainer.loggers
    assert type(logger) is getattr(lightning_loggers, expected)  # Fabric's class of the same name is not ambiguous
    full = [f"--trainer.logger=lightning.fabric.loggers.{expected}", "--trainer.logger.init_args.root_dir=f"]
    (logger,) = FederatedCLI(args=["-c", FEDAVG, *full], run=False).trainer.loggers
    assert type(logger) is getattr(fabric_loggers, expected)  # and Fabric's is there by its full path


def test_stacked_clients_from_the_command_line(no_data, capsys):
    stacked = FederatedCLI(args=["-c", FEDAVG, "--trainer.processes.stack_clients", "64"], run=False).trainer.runner
    assert isinstance(stacked, StackedRunner)
    assert stacked.size == 64
    assert isinstance(FederatedCLI(args=["-c", FEDAVG], run=False).trainer.runner, SequentialRunner)
    with pytest.raises(SystemExit):
        FederatedCLI(args=["-c", FEDAVG, "--trainer.processes.stack_clients", "0"], run=False)
    assert "field 'stack_clients' must be at least 1" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- fit/test/validate
@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """``fit`` 2 rounds, then ``test`` and ``validate`` the last checkpoint; the CSV logs after each command."""
    root = tmp_path_factory.mktemp("fedavg_digits")
    args = ["-c", FEDAVG, *tiny(root, rounds=2)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["fedhet"])
        main(["fit", *args])
        logs = {"fit": read_logs(root)}
        main(["test", *args, "--ckpt_path", "last"])
        logs["test"] = read_logs(root)
        main(["validate", *args, "--ckpt_path", "last"])
        logs["validate"] = read_logs(root)
    return root, logs


def test_fit_logs_one_row_per_round(digits_run):
    root, logs = digits_run
    assert list(logs["fit"]) == ["version_0"]
    rows = logs["fit"]["version_0"]
    assert [row["step"] for row in rows] == ["0", "1"]
    assert [value(row, "round") for row in rows] == [0.0, 1.0]
    for row in rows:
        assert 0.0 <= value(row, "val/acc_mean") <= 1.0
        assert value(row, "val/acc_worst") <= value(row, "val/acc_mean")
        assert math.isfinite(value(row, "train/loss_mean"))
        assert value(row, "comm/bytes_up") > 0
        assert value(row, "clients/participants") == 3.0
    assert (root / "version_0" / "checkpoints" / "last.ckpt").is_file()


def test_fit_saves_the_resolved_config_with_overrides(digits_run, capsys):
    root, _ = digits_run
    saved = yaml.safe_load((root / "version_0" / "config.yaml").read_text())
    assert saved["trainer"]["rounds"] == 2
    assert saved["trainer"]["default_root_dir"] == str(root)
    assert saved["model"]["class_path"] == "fedhet.modules.FedAvg"
    assert saved["model"]["init_args"]["hidden_dims"] == [64]
    assert saved["data"]["init_args"]["num_clients"] == 3
    # the saved config is itself a valid config for the CLI
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", str(root / "version_0" / "config.yaml"), "--print_config"])
    assert exit_info.value.code in (0, None)
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["rounds"] == 2


def test_test_subcommand_logs_to_a_new_version(digits_run):
    _, logs = digits_run
    assert list(logs["test"]) == ["version_0", "version_1"]
    (row,) = logs["test"]["version_1"]  # only the evaluation, after the 2 rounds of the checkpoint
    assert row["step"] == "2"
    per_client = [value(row, key) for key in row if key.startswith("test/acc/") and value(row, key) is not None]
    assert len(per_client) == 3
    assert value(row, "test/acc_mean") == pytest.approx(sum(per_client) / 3)
    assert value(row, "test/acc_worst") == pytest.approx(min(per_client))
    assert math.isfinite(value(row, "test/loss_mean"))
    assert value(row, "val/acc_mean") is None


def test_validate_subcommand_reproduces_the_last_round(digits_run):
    _, logs = digits_run
    assert list(logs["validate"]) == ["version_0", "version_1", "version_2"]
    (row,) = logs["validate"]["version_2"]
    assert row["step"] == "2"
    # plain FedAvg evaluates deterministically: the restored federation scores what its last round scored
    last_round = logs["fit"]["version_0"][-1]
    assert value(row, "val/acc_mean") == pytest.approx(value(last_round, "val/acc_mean"), abs=1e-6)
    assert value(row, "val/loss_mean") == pytest.approx(value(last_round, "val/loss_mean"), rel=1e-5)


def test_evaluation_never_overwrites_earlier_logs(digits_run):
    _, logs = digits_run
    assert logs["validate"]["version_0"] == logs["fit"]["version_0"]
    assert logs["validate"]["version_1"] == logs["test"]["version_1"]


# ---------------------------------------------------------------------------------------------------- --print_config
def test_print_config_prints_yaml_with_overrides(capsys, no_data):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", FEDAVG, "--trainer.rounds", "7", "--print_config"])
    assert exit_info.value.code in (0, None)
    out = capsys.readouterr().out
    assert "rounds:" in out
    printed = yaml.safe_load(out)
    assert printed["trainer"]["rounds"] == 7
    assert printed["model"]["class_path"] == "fedhet.modules.FedAvg"


# ---------------------------------------------------------------------------------------------------- real process
def test_python_dash_m_fedhet_fit(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "WANDB_MODE": "offline"}
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "fedhet", "fit", "-c", FEDAVG, *tiny(run_dir, rounds=1)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (rows,) = read_logs(run_dir).values()
    assert len(rows) == 1
    assert 0.0 <= value(rows[0], "val/acc_mean") <= 1.0
    assert (run_dir / "version_0" / "checkpoints" / "last.ckpt").is_file()
    assert yaml.safe_load((run_dir / "version_0" / "config.yaml").read_text())["trainer"]["rounds"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run"], "nothing may be written to the working directory"


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--trainer.roundz", "3"], "trainer.roundz"),
        (["--trainer.rounds", "abc"], "trainer.rounds"),
        (["--model.class_path", "fedhet.modules.NoSuchMethod"], "NoSuchMethod"),
        (["--model", "fedhet.modules.NoSuchMethod"], "NoSuchMethod"),
        (["--data.class_path", "fedhet.datamodules.NoSuchData"], "NoSuchData"),
    ],
    ids=["unknown-key", "wrong-type", "unknown-model-class-path", "unknown-model-name", "unknown-data-class-path"],
)
def test_parse_errors_exit_2_naming_the_key(extra, needle, tmp_path, capsys, no_data):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", FEDAVG, *tiny(tmp_path), *extra])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err
    assert needle in err
    assert not any(tmp_path.iterdir())


def test_unknown_key_in_a_yaml_file_is_refused(tmp_path, capsys, no_data):
    typo = tmp_path / "typo.yaml"
    typo.write_text("trainer:\n  roundz: 3\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", FEDAVG, "-c", str(typo), *tiny(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "roundz" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--trainer.rounds", "0"], "'rounds' must be at least 1"),
        (["--trainer.local_epochs", "0"], "'local_epochs' must be at least 1"),
        (
            [
                "--trainer.sampler.class_path",
                "fedhet.plugins.UniformSampler",
                "--trainer.sampler.init_args.fraction",
                "0",
            ],
            "'fraction' must be in",
        ),
    ],
    ids=["rounds-0", "local-epochs-0", "sampler-fraction-0"],
)
def test_bad_values_are_refused_before_any_data_is_read(extra, needle, tmp_path, capsys, no_data):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", FEDAVG, *tiny(tmp_path), *extra])
    assert exit_info.value.code == 2
    assert needle in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--trainer.rounds", "-3"], "'rounds' must be at least 1"),
        (["--trainer.local_steps", "0"], "'local_steps' must be at least 1"),
        (["--trainer.faults.max_client_failures", "1.5"], "'max_client_failures' must be in [0, 1]"),
        (["--trainer.faults.client_time_budget_s", "0"], "'client_time_budget_s' must be positive"),
        (["--trainer.seed", "1.5"], "trainer.seed"),
        (
            [
                "--trainer.sampler.class_path",
                "fedhet.plugins.UniformSampler",
                "--trainer.sampler.init_args.fraction",
                "-0.5",
            ],
            "'fraction' must be in",
        ),  # fmt: skip
        (
            [
                "--trainer.sampler.class_path",
                "fedhet.plugins.UniformSampler",
                "--trainer.sampler.init_args.fractoin",
                "0.5",
            ],
            "fractoin",
        ),  # fmt: skip
        (["--model.init_args.hidden_dims", "wide"], "model.init_args.hidden_dims: expected a Sequence, got 'wide'"),
        (["--model.init_args.no_such_knob", "1"], "no_such_knob"),
        (["--data.init_args.num_clients", "three"], "data.init_args.num_clients: expected an int, got 'three'"),
    ],
    ids=[
        "rounds-negative",
        "local-steps-0",
        "failure-budget-above-1",
        "time-budget-0",
        "seed-not-an-int",
        "fraction-negative",
        "sampler-unknown-key",
        "model-wrong-type",
        "model-unknown-key",
        "data-wrong-type",
    ],
)
def test_more_bad_settings_are_refused_before_any_data_is_read(extra, needle, tmp_path, capsys, no_data):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", FEDAVG, *tiny(tmp_path), *extra])
    assert exit_info.value.code == 2
    assert needle in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_more_clients_per_round_than_clients_is_refused_before_any_data_is_read(tmp_path, capsys, no_data):
    extra = [
        "--trainer.sampler.class_path",
        "fedhet.plugins.UniformSampler",
        "--trainer.sampler.init_args.min_clients",
        "4",
    ]
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "-c", FEDAVG, *tiny(tmp_path), *extra])  # tiny() makes a federation of 3 clients
    assert exit_info.value.code == 2
    assert "'min_clients' is 4 but the federation has only 3 clients" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_min_clients_above_a_federation_size_known_only_from_its_data_is_refused_at_fit_start(tmp_path):
    federation = FederatedDataModule.from_tensors(
        {c: (torch.rand(8, 3), torch.arange(8) % 2) for c in "abc"}, num_classes=2
    )
    federation.setup()
    assert federation.declared_num_clients == 3
    trainer = FederatedTrainer(
        sampler=UniformSampler(0.5, min_clients=4),
        reporting=Reporting(progress_bar=False),
        default_root_dir=str(tmp_path),
    )
    with pytest.raises(ValueError, match=r"'min_clients' is 4 but the federation has only 3 clients"):
        trainer.fit(FedAvg(hidden_dims=[4]), federation)
    assert not list(tmp_path.glob("version_*/checkpoints")), "no round may run"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"class_path": "fedhet.datamodules.DigitsFederation", "init_args": {"num_clients": 7}}, 7),
        ({"class_path": "fedhet.datamodules.HeartFederation", "init_args": {"sites": ["cleveland", "va"]}}, 2),
        ({"class_path": "fedhet.datamodules.MultipleFeaturesFederation"}, None),
    ],
    ids=["num-clients", "heart-sites", "unknown-until-setup"],
)
def test_federations_declare_their_size_without_reading_data(data, expected, tmp_path, no_data):
    config = tmp_path / "data.yaml"
    config.write_text(yaml.safe_dump({"data": data}))
    cli = FederatedCLI(args=["-c", FEDAVG, "-c", str(config)], run=False)
    assert cli.datamodule.declared_num_clients == expected
