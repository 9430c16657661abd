"""A server step that raises or produces NaN/Inf is named with its round and callback, before anything is saved
(issue 16, item 5); a server callback writes only what it declares, after the callbacks whose writes it reads
(issue 30)."""

import math

import pytest
import torch

from fedhet.callbacks import AnchorUpdate, DictionaryAveraging, FederatedCallback, KernelSync, ModelMatching
from fedhet.callbacks.fedpac import GLOBAL_CENTROIDS, GLOBAL_COUNTS, HEAD_NAMES
from fedhet.core import ServerAccess
from fedhet.modules import FedPAC, FedRep, HybridBody
from fedhet.plugins.hooks.server_step import check_server_order
from fedhet.plugins.storage.checkpoint import load_checkpoint
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
    assert state.round == BAD_ROUND  # written after round 0, not overwritten
    assert all(bool(torch.isfinite(t).all()) for t in state.server["shared"].values())


def test_a_callback_that_raises_on_the_server_is_named_with_its_round(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=3, callbacks=[RaisesOnTheServer()])
    with pytest.raises(RuntimeError, match=r"round 1: callback 'RaisesOnTheServer' \(on_aggregate_end\) raised Key"):
        trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)
    assert load_checkpoint(tmp_path / "version_0" / "checkpoints" / "last.ckpt").round == BAD_ROUND


# ---------------------------------------------------------------- declared server-state access and order (issue 30)
class WritesTotal(FederatedCallback):
    """Declares the broadcast statistic it writes: the round's number of uploads."""

    server_access = ServerAccess(writes=["test/total"])

    def on_aggregate_end(self, server_state, updates):
        server_state.statistics["test/total"] = torch.tensor(float(len(updates)))


class ReadsTotal(FederatedCallback):
    """Reads what :class:`WritesTotal` writes, and sends each client a shared bias filled with its double."""

    server_access = ServerAccess(reads=["test/total"], per_client=["body.*"])

    def on_aggregate_end(self, server_state, updates):
        name = next(name for name in server_state.shared if name.endswith("bias"))
        double = torch.full_like(server_state.shared[name], 2 * float(server_state.statistics["test/total"]))
        for update in updates:
            server_state.per_client[update.client_id] = {name: double}


class WritesUndeclared(WritesTotal):
    server_access = ServerAccess()


class AlsoWritesTotal(WritesTotal):
    pass


class ChangesInPlace(FederatedCallback):
    """Declares nothing, but adds to the total in place from round 1."""

    def on_aggregate_end(self, round_idx, server_state):
        if round_idx == BAD_ROUND:
            server_state.statistics["test/total"].add_(1)


class WritesUndeclaredPerClient(FederatedCallback):
    server_access = ServerAccess(per_client=["head.*"])

    def on_aggregate_end(self, server_state, updates):
        server_state.per_client[updates[0].client_id] = {"body.0.weight": torch.zeros(1)}


def test_declared_writes_in_the_stated_order_run(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=2, callbacks=[WritesTotal(), ReadsTotal()])
    trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)
    total = float(trainer.server_state.statistics["test/total"])
    payloads = trainer.server_state.per_client.values()
    assert total == 4
    assert all(bool((value == 2 * total).all()) for payload in payloads for value in payload.values())


@pytest.mark.parametrize(
    ("callback", "written"),
    [
        pytest.param(WritesUndeclared(), "server statistic 'test/total'", id="statistic"),
        pytest.param(WritesUndeclaredPerClient(), "per-client payload entry 'body.0.weight'", id="per-client"),
    ],
)
def test_a_callback_that_writes_what_it_does_not_declare_is_named_with_the_entry(
    tmp_path, tiny_federation, callback, written
):
    trainer = make_trainer(tmp_path, rounds=2, callbacks=[callback])
    name = type(callback).__name__
    with pytest.raises(RuntimeError, match=rf"round 0: callback '{name}' \(on_aggregate_end\) wrote {written}"):
        trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)


def test_an_in_place_change_of_an_undeclared_statistic_is_a_write(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=3, callbacks=[WritesTotal(), ChangesInPlace()])
    with pytest.raises(RuntimeError, match=r"round 1: callback 'ChangesInPlace' .* statistic 'test/total'"):
        trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)


@pytest.mark.parametrize(
    ("callbacks", "message"),
    [
        pytest.param(
            [ReadsTotal(), WritesTotal()],
            "callback 'ReadsTotal' reads server statistic 'test/total', which callback 'WritesTotal' writes after it",
            id="read-before-write",
        ),
        pytest.param(
            [WritesTotal(), AlsoWritesTotal()],
            "callbacks 'WritesTotal' and 'AlsoWritesTotal' both write server statistic 'test/total'",
            id="two-writers",
        ),
    ],
)
def test_callbacks_whose_order_contradicts_their_access_are_refused_before_training(
    tmp_path, tiny_federation, callbacks, message
):
    trainer = make_trainer(tmp_path, rounds=1, callbacks=callbacks)
    with pytest.raises(ValueError, match=message):
        trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)
    assert trainer.history == []


def test_every_method_declares_its_server_steps_access():
    """The methods' server callbacks declare what they write, and their methods list them in a consistent order."""
    module = FedPAC(hidden_dims=[8])
    sync, mixing = module.configure_callbacks()
    assert sync.server_access == ServerAccess(writes=[GLOBAL_CENTROIDS, GLOBAL_COUNTS])
    assert mixing.server_access == ServerAccess(per_client=HEAD_NAMES)
    check_server_order([sync, mixing])
    for callback in (AnchorUpdate(), DictionaryAveraging(), KernelSync(), ModelMatching(HybridBody)):
        access = callback.server_access
        assert access.writes or access.per_client
