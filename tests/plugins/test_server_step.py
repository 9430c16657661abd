"""A server step that raises or produces NaN/Inf is named with its round and callback, before anything is saved
(issue 16, item 5)."""

import math

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.modules import FedRep
from fedhet.plugins.checkpoint import load_checkpoint
from tests.plugins.test_trainer import make_trainer

BAD_ROUND = 1


class Harmless(FederatedCallback):
    def on_aggregate_end(self, server_state):
        pass


class PoisonsTheServer(FederatedCallback):
    """Writes NaN into a shared parameter in round ``BAD_ROUND``."""

    def on_aggregate_end(self, round_idx, server_state):
        if round_idx == BAD_ROUND:
            name = next(iter(server_state.shared))
            server_state.shared[name] = torch.full_like(server_state.shared[name], math.nan)


class RaisesOnTheServer(FederatedCallback):
    def on_aggregate_end(self, round_idx):
        if round_idx == BAD_ROUND:
            raise KeyError("centroids")


def test_a_callback_that_makes_the_server_state_nan_is_named_and_the_last_checkpoint_kept(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=3, callbacks=[Harmless(), PoisonsTheServer()])
    with pytest.raises(RuntimeError, match=r"round 1: callback 'PoisonsTheServer' \(on_aggregate_end\) made the"):
        trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)
    assert len(trainer.history) == BAD_ROUND  # the poisoned round was neither evaluated nor logged
    state = load_checkpoint(tmp_path / "version_0" / "checkpoints" / "last.ckpt")
    assert state["round"] == BAD_ROUND  # written after round 0, not overwritten
    assert all(bool(torch.isfinite(t).all()) for t in state["server"]["shared"].values())


def test_a_callback_that_raises_on_the_server_is_named_with_its_round(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=3, callbacks=[RaisesOnTheServer()])
    with pytest.raises(RuntimeError, match=r"round 1: callback 'RaisesOnTheServer' \(on_aggregate_end\) raised Key"):
        trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)
    assert load_checkpoint(tmp_path / "version_0" / "checkpoints" / "last.ckpt")["round"] == BAD_ROUND
