"""Resuming says what it does with `rounds` (issue 16, item 7): fewer rounds than done are refused, as many warn, and
with full_last_round a resumed crash is identical to a straight run while an extended finished run is flagged."""

import logging

import pytest

from fedhet.callbacks import FederatedCallback
from fedhet.modules import FedRep
from fedhet.plugins import UniformSampler
from tests.plugins.test_trainer import _comparable, make_trainer


def test_resuming_with_fewer_rounds_than_done_is_refused(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=2).fit(FedRep(hidden_dims=[8]), tiny_federation)
    with pytest.raises(ValueError, match="has 2 rounds done, but field 'rounds' is 1: nothing would be trained"):
        make_trainer(tmp_path, rounds=1).fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")


def test_resuming_a_finished_run_says_there_is_nothing_to_train(tmp_path, tiny_federation, caplog):
    make_trainer(tmp_path, rounds=2).fit(FedRep(hidden_dims=[8]), tiny_federation)
    with caplog.at_level(logging.WARNING, logger="fedhet.plugins.storage.checkpoint"):
        make_trainer(tmp_path, rounds=2).fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert "has all 2 rounds done: nothing to train" in caplog.text


class CrashAt(FederatedCallback):
    def __init__(self, round_idx):
        self.round_idx = round_idx

    def on_round_start(self, round_idx):
        if round_idx == self.round_idx:
            raise KeyboardInterrupt


def _sampled_trainer(root, rounds, callbacks=()):
    sampler = UniformSampler(fraction=0.5, full_last_round=True)
    return make_trainer(root, rounds=rounds, sampler=sampler, callbacks=list(callbacks))


@pytest.mark.kernels
def test_full_last_round_crash_resume_is_identical_and_an_extension_is_flagged(tmp_path, tiny_federation, caplog):
    straight = _sampled_trainer(tmp_path / "straight", 4)
    straight.fit(FedRep(hidden_dims=[8], dropout=0.1), tiny_federation)
    with pytest.raises(KeyboardInterrupt):
        _sampled_trainer(tmp_path / "crashed", 4, [CrashAt(2)]).fit(
            FedRep(hidden_dims=[8], dropout=0.1), tiny_federation
        )
    resumed = _sampled_trainer(tmp_path / "crashed", 4)
    resumed.fit(FedRep(hidden_dims=[8], dropout=0.1), tiny_federation, ckpt_path="last")
    assert _comparable(resumed.history) == _comparable(straight.history)

    _sampled_trainer(tmp_path / "extended", 2).fit(FedRep(hidden_dims=[8], dropout=0.1), tiny_federation)
    with caplog.at_level(logging.WARNING, logger="fedhet.plugins.storage.checkpoint"):
        extended = _sampled_trainer(tmp_path / "extended", 4)
        extended.fit(FedRep(hidden_dims=[8], dropout=0.1), tiny_federation, ckpt_path="last")
    assert "whose last round (round 1) took every client (full_last_round)" in caplog.text
    assert extended.history[1]["clients/participants"] == 4  # the old last round: every client
    assert straight.history[1]["clients/participants"] == 2
