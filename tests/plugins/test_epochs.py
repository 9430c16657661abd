"""A federation's length in epochs: Global Layers' per-step schedule without computing rounds by hand."""

import sys
from pathlib import Path

import pytest

from fedhet.cli import FederatedCLI
from fedhet.modules import GlobalLayers
from fedhet.plugins.rounds.epochs import EpochSchedule, epoch_schedule
from tests.integrations.test_gl_federation import CLIENTS, TINY, federation, fit


def test_a_module_without_rounds_per_epoch_takes_one_round_an_epoch():
    assert epoch_schedule(object(), epochs=7, eval_every_epochs=2) == EpochSchedule(rounds=7, eval_every=2)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"batches_per_epoch": 5, "aggregate_every": "step"}, EpochSchedule(rounds=50, eval_every=5)),  # the paper
        ({"batches_per_epoch": 5, "aggregate_every": "epoch"}, EpochSchedule(rounds=10, eval_every=1)),
        ({"batches_per_epoch": None}, EpochSchedule(rounds=10, eval_every=1)),
    ],
)
def test_global_layers_rounds_per_epoch(options, expected):
    assert epoch_schedule(GlobalLayers(**options, **TINY), epochs=10) == expected


@pytest.mark.parametrize("bad", [{"epochs": 0}, {"epochs": 2, "eval_every_epochs": 0}])
def test_an_empty_schedule_is_refused(bad):
    with pytest.raises(ValueError, match="must be >= 1"):
        epoch_schedule(object(), **bad)


@pytest.mark.parametrize("aggregate_every", ["step", "epoch"])
def test_either_schedule_gives_every_client_its_batches_per_epoch_steps_each_epoch(aggregate_every, tmp_path):
    model = GlobalLayers(batches_per_epoch=3, aggregate_every=aggregate_every, **TINY)
    schedule = epoch_schedule(model, epochs=2)
    _, rec = fit(tmp_path, model, federation(), rounds=schedule.rounds)
    assert len(rec.aggregates) == schedule.rounds
    for cid in CLIENTS:
        assert sum(steps for (_, c), steps in rec.steps.items() if c == cid) == 2 * 3  # epochs x B


CONFIGS = Path(__file__).parents[2] / "configs"


@pytest.fixture
def no_argv(monkeypatch):
    """LightningCLI warns when it is given ``args`` while ``sys.argv`` holds pytest's own arguments."""
    monkeypatch.setattr(sys, "argv", ["fedhet"])


def test_a_config_states_epochs_and_the_cli_takes_the_rounds_from_the_module(no_argv):
    heart = ["-c", str(CONFIGS / "gl" / "heart.yaml")]
    trainer = FederatedCLI(args=heart, run=False).trainer  # epochs: 10, B = 5, aggregate_every: step
    assert (trainer.rounds, trainer.reporting.eval_every) == (50, 5)
    per_epoch = [*heart, "--model.init_args.aggregate_every", "epoch", "--epochs", "3"]
    trainer = FederatedCLI(args=per_epoch, run=False).trainer
    assert (trainer.rounds, trainer.reporting.eval_every) == (3, 1)
    rounds = [*heart, "--epochs", "null", "--trainer.rounds", "7"]
    assert FederatedCLI(args=rounds, run=False).trainer.rounds == 7


def test_a_length_given_twice_is_refused(no_argv, capsys):
    with pytest.raises(SystemExit):
        FederatedCLI(args=["-c", str(CONFIGS / "gl" / "heart.yaml"), "--trainer.rounds", "7"], run=False)
    assert "give the run's length once: epochs=10 or trainer.rounds=7" in capsys.readouterr().err
