"""The public client-execution API is enough to train clients elsewhere (as a Flower adapter does)."""

import copy
import gc

import pytest
import torch

from fedhet.core import ClientState, RoundUploads, num_bytes
from fedhet.modules import FedAvg, FedRep
from fedhet.plugins import ClientRunner, FederatedTrainer, Processes, Reporting


class ElsewhereRunner(ClientRunner):
    """Each round's clients train in a second trainer's engine, fed copies of the server state, like remote nodes.

    The client side keeps its clients' personal state in its own store; the server keeps none of it.
    """

    def __init__(self, client_side: FederatedTrainer) -> None:
        self.client_side = client_side

    def run(self, context, client_ids, round_idx):
        server = context.server_state
        self.client_side.server_state = copy.deepcopy(server)  # what the server sends
        remote = copy.deepcopy(self.client_side.fit_clients(client_ids, round_idx))  # what the clients send back
        uploads = RoundUploads(failures=remote.failures)
        for update in remote.updates:
            sent = num_bytes(server.payload_for(update.client_id, context.slot(update.client_id).shared))
            context.admit(update, ClientState({}), sent + num_bytes(server.statistics), 0.0, uploads)
        return uploads

    def evaluate(self, context, client_ids, stage, round_idx):
        self.client_side.server_state = copy.deepcopy(context.server_state)
        return self.client_side.runner.evaluate(self.client_side.context, client_ids, stage, round_idx)


def quiet_trainer(root, rounds, stack_clients=None, **more):
    """A CPU trainer without progress bar or logger, writing under ``root``."""
    return FederatedTrainer(
        rounds=rounds,
        processes=Processes(accelerator="cpu", stack_clients=stack_clients),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(root),
        **more,
    )


def trainer(tmp_path, name):
    return quiet_trainer(tmp_path / name, 3)


def test_clients_trained_elsewhere_give_the_in_process_federation(tmp_path, tiny_federation):
    here = trainer(tmp_path, "here")
    here.fit(FedRep(hidden_dims=[8], head_epochs=1), tiny_federation)

    client_side = trainer(tmp_path, "clients")
    client_side.setup(FedRep(hidden_dims=[8], head_epochs=1), copy.deepcopy(tiny_federation))
    server = trainer(tmp_path, "server")
    server.runner = ElsewhereRunner(client_side)
    server.fit(FedRep(hidden_dims=[8], head_epochs=1), tiny_federation)

    torch.testing.assert_close(server.server_state.shared, here.server_state.shared, rtol=0, atol=0)
    for cid in tiny_federation.client_ids:
        assert server.store[cid].personal == {}  # personal state stayed with the clients
        torch.testing.assert_close(client_side.store[cid].personal, here.store[cid].personal, rtol=0, atol=0)
    for mine, theirs in zip(server.history, here.history, strict=True):
        for key in ("train/loss_mean", "val/acc_mean", "comm/bytes_up", "comm/bytes_down"):
            assert mine[key] == theirs[key], key


def test_fit_asks_the_runner_to_check_the_federation_before_any_round(tmp_path, tiny_federation):
    """The trainer calls its runner's check (the stacked runner refuses modules that cannot stack there)."""
    from fedhet.modules import FedAvg
    from fedhet.plugins import SequentialRunner

    class Refusing(SequentialRunner):
        def check(self, context):
            raise ValueError(f"cannot train {len(context.architectures())} architecture(s)")

    run = quiet_trainer(tmp_path, 2, runner=Refusing())
    with pytest.raises(ValueError, match="cannot train 1 architecture"):
        run.fit(FedAvg(hidden_dims=[4]), tiny_federation)
    assert run.history == []


class FreezeProbe:
    """Records, at each client's start and each round's end, how many objects the garbage collector keeps frozen."""

    def __init__(self) -> None:
        self.in_round: list[int] = []
        self.after_round: list[int] = []

    def on_client_fit_start(self) -> None:
        self.in_round.append(gc.get_freeze_count())

    def on_round_end(self) -> None:
        self.after_round.append(gc.get_freeze_count())


@pytest.mark.parametrize("stack_clients", [None, 2])
def test_a_rounds_clients_train_with_the_older_objects_frozen_and_unfrozen_after(
    tmp_path, tiny_federation, stack_clients
):
    probe = FreezeProbe()
    fit = quiet_trainer(tmp_path, 2, stack_clients, callbacks=[probe])
    assert gc.get_freeze_count() == 0
    fit.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert len(probe.in_round) == 2 * len(tiny_federation.client_ids)
    assert min(probe.in_round) > 0  # every client trains with the objects older than its round out of reach
    assert probe.after_round == [0, 0]
    assert gc.get_freeze_count() == 0


def test_a_freeze_made_elsewhere_is_left_as_it_is(tmp_path, tiny_federation):
    gc.freeze()
    try:
        probe = FreezeProbe()
        fit = quiet_trainer(tmp_path, 1, callbacks=[probe])
        fit.fit(FedAvg(hidden_dims=[8]), tiny_federation)
        assert len(probe.after_round) == 1
        assert probe.after_round[0] > 0  # not unfrozen by the round
    finally:
        gc.unfreeze()
