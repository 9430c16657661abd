"""Lightning's ModelCheckpoint and EarlyStopping at round granularity; other Lightning callbacks are refused."""

import sys
from pathlib import Path

import pytest
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, RichProgressBar

from fedhet.cli import main
from fedhet.modules import FedAvg
from fedhet.plugins import FederatedTrainer, Processes, Reporting
from fedhet.plugins.storage.checkpoint import load_checkpoint
from tests.trainer_options import trainer_options

FEDAVG = str(Path(__file__).parents[2] / "configs" / "fedavg" / "digits.yaml")


def fit(tmp_path, federation, callbacks, rounds=5, **kwargs):
    trainer = FederatedTrainer(
        **trainer_options(
            rounds=rounds,
            processes=Processes(accelerator="cpu"),
            reporting=Reporting(progress_bar=False),
            default_root_dir=tmp_path,
            callbacks=callbacks,
            **kwargs,
        )
    )
    trainer.fit(FedAvg(hidden_dims=[8], lr=0.05), federation)
    return trainer


def test_model_checkpoint_keeps_the_top_k_rounds(tmp_path, tiny_federation):
    checkpoint = ModelCheckpoint(monitor="val/loss_mean", mode="min", save_top_k=2)
    trainer = fit(tmp_path, tiny_federation, [checkpoint])
    losses = [row["val/loss_mean"] for row in trainer.history]
    best_two = sorted(range(5), key=lambda r: losses[r])[:2]
    kept = sorted(p for p in (tmp_path / "version_0" / "checkpoints").glob("round=*.ckpt"))
    assert sorted(load_checkpoint(p).round - 1 for p in kept) == sorted(best_two)
    assert load_checkpoint(checkpoint.best_model_path).round - 1 == best_two[0]
    assert float(checkpoint.best_model_score) == pytest.approx(losses[best_two[0]])
    assert sorted(checkpoint.best_k_models) == sorted(str(p) for p in kept)
    assert Path(checkpoint.best_model_path).name == f"round={best_two[0]}-val_loss_mean={losses[best_two[0]]:.4f}.ckpt"


def test_model_checkpoint_without_monitor_keeps_the_latest_and_honours_filename(tmp_path, tiny_federation):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "kept", filename="r{round}-{val_acc_mean:.3f}", save_top_k=1)
    trainer = fit(tmp_path, tiny_federation, [checkpoint], rounds=3)
    (kept,) = (tmp_path / "kept").iterdir()
    assert kept.name == f"r2-{trainer.history[-1]['val/acc_mean']:.3f}.ckpt"
    assert load_checkpoint(kept).round == 3


def test_early_stopping_ends_the_federation_after_the_round_that_triggers_it(tmp_path, tiny_federation):
    stopping = EarlyStopping(monitor="val/loss_mean", mode="min", patience=1, min_delta=100.0)
    trainer = fit(tmp_path, tiny_federation, [stopping], rounds=10)
    assert len(trainer.history) == 2  # round 0 sets the best; round 1 cannot improve on it by 100: stop
    assert stopping.stopped_epoch == 1
    assert "did not improve" in stopping.stopping_reason_message
    assert load_checkpoint(tmp_path / "version_0" / "checkpoints" / "last.ckpt").round == 2


def test_early_stopping_threshold(tmp_path, tiny_federation):
    stopping = EarlyStopping(monitor="val/acc_mean", mode="max", stopping_threshold=0.0, patience=100)
    trainer = fit(tmp_path, tiny_federation, [stopping], rounds=10)
    assert len(trainer.history) == 1
    assert "stopping threshold" in stopping.stopping_reason_message


@pytest.mark.parametrize(
    ("callback", "reason"),
    [(LearningRateMonitor(), "no learning rate changes over rounds"), (RichProgressBar(), "no hook that would run it")],
)
def test_other_lightning_callbacks_are_refused_by_name(tmp_path, tiny_federation, callback, reason):
    with pytest.raises(ValueError, match=f"Lightning's {type(callback).__name__}, which a federation cannot honour"):
        fit(tmp_path, tiny_federation, [callback], rounds=1)
    with pytest.raises(ValueError, match=reason):
        fit(tmp_path, tiny_federation, [callback], rounds=1)


def test_model_checkpoint_from_the_command_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    args = ["fit", "-c", FEDAVG, "--trainer.rounds", "3", "--data.init_args.num_clients", "3"]
    args += ["--trainer.reporting.progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)]
    args += ["--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.monitor=val/acc_mean"]
    args += ["--trainer.callbacks.mode=max", "--trainer.callbacks.save_top_k=1"]
    main(args)
    (kept,) = (tmp_path / "version_0" / "checkpoints").glob("round=*.ckpt")
    assert kept.name.startswith("round=")
    assert "val_acc_mean=" in kept.name
