"""A federation's length in epochs: Global Layers' per-step schedule without computing rounds by hand."""

import pytest

from fedhet.modules import GlobalLayers
from fedhet.plugins.epochs import EpochSchedule, epoch_schedule
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
def test_either_schedule_gives_every_client_its_batches_per_epoch_steps_each_epoch(aggregate_every):
    model = GlobalLayers(batches_per_epoch=3, aggregate_every=aggregate_every, **TINY)
    schedule = epoch_schedule(model, epochs=2)
    _, rec = fit(model, federation(), rounds=schedule.rounds)
    assert len(rec.aggregates) == schedule.rounds
    for cid in CLIENTS:
        assert sum(steps for (_, c), steps in rec.steps.items() if c == cid) == 2 * 3  # epochs x B
