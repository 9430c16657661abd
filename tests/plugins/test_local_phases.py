"""A local phase can step an optimizer of its own (e.g. FLIC's pre-training of its embedding with its own Adam)."""

import copy

import pytest
import torch
from lightning.fabric import Fabric

from fedhet.core import LocalPhase
from fedhet.modules import FedAvg
from fedhet.plugins.clients.local_loop import run_local_training
from fedhet.plugins.clients.stacked import stacking_refusal
from tests.conftest import make_client
from tests.plugins.test_stacked import ROUNDS, StackSpy, assert_same_federation, fit


class PretrainsItsHead(FedAvg):
    """A head-only phase stepped by its own Adam, then the usual SGD phase over everything."""

    def configure_optimizers(self):
        return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.Adam(self.head.parameters(), lr=0.01)]

    def local_phases(self):
        return [LocalPhase("pretrain", ("head.*",), epochs=2, optimizer=1), LocalPhase("local")]


def built(module, client):
    module.setup_client(client.spec)
    module.configure_model()
    return module


def test_a_phase_steps_the_optimizer_it_names():
    client = make_client("a", 24, 0)
    batches = list(client.train_dataloader())  # a fixed list: the two runs see the same batches
    engine = built(PretrainsItsHead(hidden_dims=[4]), client)
    by_hand = copy.deepcopy(engine)
    fabric = Fabric(accelerator="cpu", devices=1)
    metrics, _ = run_local_training(fabric, engine, batches, engine.local_phases(), 1, None)

    sgd, adam = by_hand.configure_optimizers()
    for optimizer, trainable, epochs in ((adam, ("head.weight", "head.bias"), 2), (sgd, None, 1)):
        for name, param in by_hand.named_parameters():
            param.requires_grad_(trainable is None or name in trainable)
        for _ in range(epochs):
            for x, y in batches:
                torch.nn.functional.cross_entropy(by_hand(x), y).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    torch.testing.assert_close(engine.state_dict(), by_hand.state_dict())
    assert metrics["steps"] == 3 * len(batches)


class FailsInItsHeadPhase(PretrainsItsHead):
    def training_step(self, batch, batch_idx):
        if self.local_phase.name == "pretrain" and batch_idx == 1:
            raise RuntimeError("step on fire")
        return super().training_step(batch, batch_idx)


def test_a_step_that_raises_leaves_its_phase():
    """The clients of an architecture share one module: a client whose step raises in a head-only phase leaves it
    with every parameter trainable, as a client that finishes does, so the next client trains its whole model."""
    client = make_client("a", 24, 0)
    module = built(FailsInItsHeadPhase(hidden_dims=[4]), client)
    fabric = Fabric(accelerator="cpu", devices=1)
    with pytest.raises(RuntimeError, match="step on fire"):
        run_local_training(fabric, module, list(client.train_dataloader()), module.local_phases(), 1, None)
    assert module.local_phase is None
    assert all(param.requires_grad for param in module.parameters())


def test_a_phase_naming_a_missing_optimizer_is_refused_before_training():
    client = make_client("a", 24, 0)
    module = built(FedAvg(hidden_dims=[4]), client)
    with pytest.raises(ValueError, match="local phase 'extra' names optimizer 1, but configure_optimizers"):
        run_local_training(
            Fabric(accelerator="cpu", devices=1), module, [], [LocalPhase("extra", optimizer=1)], 1, None
        )


def test_phases_with_optimizers_of_their_own_train_in_stacks_as_one_by_one(tmp_path, monkeypatch, float64):
    """Each optimizer of a stack steps the stacked leaves of its own parameters, in the phases that name it (in
    float64, where the two orders of the same sums agree to :data:`tests.rounding.FLOAT64`)."""
    module = built(PretrainsItsHead(hidden_dims=[4]), make_client("a", 24, 0))
    assert stacking_refusal(module) is None
    sequential = fit(tmp_path / "seq", PretrainsItsHead(hidden_dims=[8]))
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", PretrainsItsHead(hidden_dims=[8]), stack_clients=3)
    assert_same_federation(sequential, stacked)
    assert spy.sizes == [3, 3, 2] * ROUNDS


class TwoOptimizersOnePass(FedAvg):
    """Head and body on two optimizers that both step after each backward pass; a pre-training phase reports apart."""

    def configure_optimizers(self):
        head = [p for name, p in self.named_parameters() if name.startswith("head.")]
        body = [p for name, p in self.named_parameters() if not name.startswith("head.")]
        return [torch.optim.SGD(head, lr=0.1), torch.optim.SGD(body, lr=0.05)]

    def preparation_phases(self):
        return [LocalPhase("warm", ("head.*",), epochs=1, optimizer=0, loss_key="train/warm_loss")]

    def local_phases(self):
        return [LocalPhase("local", optimizer=(0, 1))]


def test_a_phase_steps_every_optimizer_it_names_after_one_backward_pass():
    client = make_client("a", 24, 0)
    batches = list(client.train_dataloader())
    engine = built(TwoOptimizersOnePass(hidden_dims=[4]), client)
    by_hand = copy.deepcopy(engine)
    phases = engine.preparation_phases() + engine.local_phases()
    metrics, _ = run_local_training(Fabric(accelerator="cpu", devices=1), engine, batches, phases, 2, None)

    head_sgd, body_sgd = by_hand.configure_optimizers()
    warm = []
    for name, param in by_hand.named_parameters():
        param.requires_grad_(name.startswith("head."))
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(by_hand(x), y)
        loss.backward()
        head_sgd.step()
        head_sgd.zero_grad(set_to_none=True)
        warm.append(loss.item())
    for param in by_hand.parameters():
        param.requires_grad_(True)
    local = []
    for _ in range(2):
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(by_hand(x), y)
            loss.backward()
            for optimizer in (head_sgd, body_sgd):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            local.append(loss.item())
    torch.testing.assert_close(engine.state_dict(), by_hand.state_dict())
    assert metrics["loss"] == pytest.approx(sum(local) / len(local))  # the preparation loss is reported apart
    assert metrics["train/warm_loss"] == pytest.approx(sum(warm) / len(warm))
    assert metrics["steps"] == 3 * len(batches)


def test_a_phase_with_a_batch_size_draws_its_own_batches_from_the_clients_data():
    client = make_client("a", 30, 0)
    module = built(FedAvg(hidden_dims=[4]), client)
    seen = []
    module.training_step = lambda batch, batch_idx: (seen.append(len(batch[1])), module.sample_losses(batch).mean())[1]
    phase = LocalPhase("small", epochs=1, batch_size=7)
    run_local_training(Fabric(accelerator="cpu", devices=1), module, client.train_dataloader(), [phase], 1, None)
    n = len(client.train_dataset)
    assert seen == [7] * (n // 7) + ([n % 7] if n % 7 else [])
    listed = list(client.train_dataloader())  # no dataset to draw from
    with pytest.raises(TypeError, match="local phase 'small' sets batch_size, but the client's loader"):
        run_local_training(Fabric(accelerator="cpu", devices=1), module, listed, [phase], 1, None)


def test_the_engine_hands_batches_and_phases_over_and_takes_them_back():
    client = make_client("a", 24, 0)
    module = built(FedAvg(hidden_dims=[4]), client)
    handed = []
    module.on_train_start = lambda: handed.append((module.local_training, list(module.train_batches())))
    loader = client.train_dataloader()
    run_local_training(Fabric(accelerator="cpu", devices=1), module, loader, [LocalPhase()], 1, None)
    ((training, batches),) = handed
    assert training.batches is loader
    assert [p.name for p in training.phases] == ["local"]
    assert len(batches) == len(list(loader))
    assert module.local_training is None  # taken back when local training ends
    with pytest.warns(DeprecationWarning, match="local_train_loader is deprecated"):
        module.local_train_loader = loader  # the old hand-off still works, with a warning
    assert module.train_batches() is loader
