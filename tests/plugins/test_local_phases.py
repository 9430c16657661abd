"""A local phase can step an optimizer of its own (e.g. FLIC's pre-training of its embedding with its own Adam)."""

import copy

import pytest
import torch
from lightning.fabric import Fabric

from fedhet.core import LocalPhase
from fedhet.modules import FedAvg
from fedhet.plugins.local_loop import run_local_training
from fedhet.plugins.stacked import stacking_refusal
from tests.conftest import make_client


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


def test_a_phase_naming_a_missing_optimizer_is_refused_before_training():
    client = make_client("a", 24, 0)
    module = built(FedAvg(hidden_dims=[4]), client)
    with pytest.raises(ValueError, match="local phase 'extra' names optimizer 1, but configure_optimizers"):
        run_local_training(
            Fabric(accelerator="cpu", devices=1), module, [], [LocalPhase("extra", optimizer=1)], 1, None
        )


def test_several_optimizers_are_trained_one_by_one_not_in_stacks():
    module = built(PretrainsItsHead(hidden_dims=[4]), make_client("a", 24, 0))
    assert stacking_refusal(module) == "it has 2 optimizers (a stack steps one)"
