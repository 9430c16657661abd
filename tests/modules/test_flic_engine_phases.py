"""FLIC's pre-training and anchor steps as engine phases give the same client as the module's own loop."""

import copy

import pytest
import torch
from lightning.fabric import Fabric

from fedhet.callbacks.flic import ANCHOR_FACTORS, ANCHOR_MEANS
from fedhet.core import LocalTraining
from fedhet.modules import FLIC
from fedhet.plugins.clients.local_loop import phase_batches, run_local_training
from tests.conftest import make_client

SMALL = {"latent_dim": 8, "embedding_hidden_dims": [16], "hidden_width": 12, "anchor_std": 3.0, "pretrain_epochs": 2}


def built(client, **kwargs):
    module = FLIC(**{**SMALL, **kwargs})
    client.setup("fit")
    module.setup_client(client.spec)
    module.configure_model()
    return module


def by_its_own_loop(module, loader, local_epochs):
    """What a plain Trainer does: one optimizer, pre-training and anchor steps inside the module's hooks."""
    module.train_batches = lambda: loader
    optimizer = module.configure_optimizers()  # no LocalTraining handed over: the model's Adam alone
    module.train()
    module.on_train_start()
    for phase in module.local_phases():
        module.set_local_phase(phase)
        for batch_idx, batch in enumerate(phase_batches(loader, phase, local_epochs, None)):
            module.training_step(batch, batch_idx).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    module.on_train_end()


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"variant": "hl", "learn_covariance": True, "pretrain_batch_size": 5, "anchor_stats": "sampled"}],
)
def test_engine_phases_give_the_client_of_the_modules_own_loop(kwargs):
    client = make_client("solo", 60, 7)
    engine = built(client, **kwargs)
    own = copy.deepcopy(engine)
    loader = client.train_dataloader()
    phases = engine.preparation_phases() + engine.local_phases()
    assert [(p.name, p.optimizer) for p in phases][:2] == [("pretrain", 1), ("local", (0, 2))]
    torch.manual_seed(0)
    metrics, _ = run_local_training(Fabric(accelerator="cpu", devices=1), engine, loader, phases, 2, None)
    torch.manual_seed(0)
    by_its_own_loop(own, loader, 2)

    torch.testing.assert_close(engine.state_dict(), own.state_dict(), rtol=0, atol=0)
    uploads, expected = engine.client_statistics(), own.client_statistics()
    assert set(uploads) == set(expected) == ({ANCHOR_MEANS, ANCHOR_FACTORS} if kwargs else {ANCHOR_MEANS})
    for name in uploads:
        torch.testing.assert_close(uploads[name], expected[name], rtol=0, atol=0)
    assert engine.pretrain_history == pytest.approx(own.pretrain_history, rel=1e-6)
    assert len(engine.pretrain_history) == 2
    assert bool(engine.pretrained)
    assert metrics["train/pretrain_loss"] == pytest.approx(sum(own.pretrain_history) / 2, rel=1e-5)


def test_later_participations_realign_as_a_phase_and_the_first_pretrains_once():
    client = make_client("solo", 40, 3)
    module = built(client, realign_epochs=1)
    assert [(p.name, p.epochs, p.trainable) for p in module.preparation_phases()] == [
        ("pretrain", 2, ("body.embed.*",))
    ]
    run_local_training(Fabric(accelerator="cpu", devices=1), module, client.train_dataloader(),
                       module.preparation_phases() + module.local_phases(), 1, None)  # fmt: skip
    assert [(p.name, p.epochs) for p in module.preparation_phases()] == [("realign", 1)]
    assert built(client, realign_epochs=0, pretrain_epochs=0).preparation_phases() == []


def test_the_engine_runs_the_pretraining_so_the_hook_does_not():
    client = make_client("solo", 40, 3)
    module = built(client)
    module.set_local_training(LocalTraining(client.train_dataloader(), tuple(module.preparation_phases())))
    module.on_train_start()
    assert not bool(module.pretrained)  # left to the engine's phase
    assert module.pretrain_history == []
