"""ModuleSlot: optimizers reused across clients train as new ones would; tensors are read without state_dict walks."""

import copy

import pytest
import torch
from torch import nn

from fedhet.core import ClientSpec
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedAvg, FedPAC, FedRep, GlobalLayers
from fedhet.plugins import FederatedTrainer, Processes, Reporting
from fedhet.plugins.clients.slots import ModuleSlot
from tests.conftest import make_client


def built(module, dim=6, classes=3):
    module.setup_client(ClientSpec("a", (dim,), classes, tuple(range(classes)), num_train=8))
    module.configure_model()
    return module


def fit(tmp_path, name, model, federation):
    trainer = FederatedTrainer(
        rounds=3,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path / name),
    )
    trainer.fit(model, copy.deepcopy(federation))
    return trainer


@pytest.mark.parametrize(
    "make",
    [
        lambda: FedAvg(hidden_dims=[8], momentum=0.9),  # SGD momentum: state the reset must clear
        lambda: FedRep(hidden_dims=[8], head_epochs=1, optimizer="adam", lr=0.01),  # Adam: moments and step counts
        lambda: FedPAC(hidden_dims=[8], head_epochs=1, momentum=0.5),  # two parameter groups with their own lr
    ],
    ids=["sgd-momentum", "adam", "fedpac"],
)
def test_reused_optimizers_train_exactly_as_new_ones(tmp_path, tiny_federation, make):
    reused, fresh = make(), make()
    assert reused.reuse_optimizers
    fresh.reuse_optimizers = False  # a new set of optimizers per client, as configure_optimizers() builds them
    a = fit(tmp_path, "reused", reused, tiny_federation)
    b = fit(tmp_path, "fresh", fresh, tiny_federation)
    torch.testing.assert_close(a.server_state.shared, b.server_state.shared, rtol=0, atol=0)
    for cid in tiny_federation.client_ids:
        torch.testing.assert_close(a.store[cid].personal, b.store[cid].personal, rtol=0, atol=0)
    assert [h["train/loss_mean"] for h in a.history] == [h["train/loss_mean"] for h in b.history]


def test_reused_optimizers_carry_each_clients_kept_state_exactly(tmp_path):
    """Global Layers keeps each client's AdamW state across rounds: a reused optimizer reloads it, as a new one does."""
    data = FederatedDataModule([make_client(cid, 40, seed) for seed, cid in enumerate("abc")])
    tiny = {"embed_dim": 4, "num_heads": 2, "num_blocks": 1, "width": 8, "lr": 1e-2}
    reused, fresh = GlobalLayers(**tiny), GlobalLayers(**tiny)
    assert reused.reuse_optimizers
    assert reused.keep_optimizer_state
    fresh.reuse_optimizers = False
    a = fit(tmp_path, "reused", reused, data)
    b = fit(tmp_path, "fresh", fresh, data)
    torch.testing.assert_close(a.server_state.shared, b.server_state.shared, rtol=0, atol=0)
    for cid in data.client_ids:
        torch.testing.assert_close(a.store[cid].personal, b.store[cid].personal, rtol=0, atol=0)
        torch.testing.assert_close(a.store[cid].optimizer, b.store[cid].optimizer, rtol=0, atol=0)
        assert a.store[cid].optimizer["state"]  # AdamW moments were kept


def test_optimizers_are_reset_to_their_built_state_for_each_client():
    slot = ModuleSlot(built(FedAvg(hidden_dims=[8], momentum=0.9, lr=0.1)))
    (optimizer,) = slot.optimizers()
    slot.module(torch.randn(4, 6)).sum().backward()
    optimizer.step()
    optimizer.param_groups[0]["lr"] = 123.0  # a module or hook that changed a setting during a client's training
    assert optimizer.state  # the momentum buffers of that client
    (again,) = slot.optimizers()
    assert again is optimizer
    assert not again.state
    assert again.param_groups[0]["lr"] == 0.1
    assert again.param_groups[0]["momentum"] == 0.9


def test_modules_that_do_not_allow_reuse_get_new_optimizers():
    module = built(FedAvg(hidden_dims=[8]))
    module.reuse_optimizers = False
    slot = ModuleSlot(module)
    assert slot.optimizers()[0] is not slot.optimizers()[0]


def test_a_replaced_parameter_is_found_and_its_stale_optimizer_dropped():
    module = built(FedAvg(hidden_dims=[8]))
    slot = ModuleSlot(module)
    (optimizer,) = slot.optimizers()
    assert slot.tensors()["head.weight"] is module.head.weight  # the module's own tensors, no copies
    module.head.weight = nn.Parameter(torch.zeros_like(module.head.weight))  # replaced during "training"
    assert slot.tensors()["head.weight"] is module.head.weight
    assert slot.targets["head.weight"] is module.head.weight  # the next client is loaded into the new tensor
    (rebuilt,) = slot.optimizers()
    assert rebuilt is not optimizer
    assert any(p is module.head.weight for group in rebuilt.param_groups for p in group["params"])


class NotedLinear(nn.Linear):
    """A layer with extra state in its state_dict (not a parameter or buffer)."""

    def get_extra_state(self):
        return {"note": 1}

    def set_extra_state(self, state):
        pass


def test_a_module_with_state_dict_extras_reads_its_state_dict_every_time():
    module = built(FedAvg(hidden_dims=[8]))
    module.register_buffer("count", torch.zeros(()))
    module.head = NotedLinear(8, 3)  # its extra state is in the state_dict: no fast path
    slot = ModuleSlot(module)
    assert slot._homes is None
    first = slot.tensors()
    assert first.keys() == module.state_dict(keep_vars=True).keys()
    module.count = torch.ones(())  # replace a buffer
    assert slot.tensors()["count"] is module.count
