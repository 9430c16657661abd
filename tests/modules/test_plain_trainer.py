"""Every baseline module trains one client on its own under a plain ``lightning.Trainer``."""

import math

import lightning
import pytest
import torch
from lightning.pytorch import Callback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fedhet.modules import FedAvg, FedBABU, FedPer, FedProx, FedRep, LocalOnly
from tests.conftest import make_client, plain_trainer

METHODS = [LocalOnly, FedAvg, FedRep, FedPer, FedBABU, FedProx]
DIM = 5  # not the make_client default, so that a wrongly sized input layer shows


def client(seed=0):
    return make_client("solo", 120, seed, dim=DIM, val_fraction=0.2, test_fraction=0.2)


def first_linear(module):
    return next(layer for layer in module.body.modules() if isinstance(layer, nn.Linear))


class EpochLosses(Callback):
    """Mean training loss of each epoch."""

    def __init__(self):
        self.epochs = []
        self._batch = []

    def on_train_epoch_start(self, trainer, pl_module):
        self._batch = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs if isinstance(outputs, torch.Tensor) else outputs["loss"]
        self._batch.append(float(loss))

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs.append(sum(self._batch) / len(self._batch))


class TrainableNames(Callback):
    """The trainable parameter names during each epoch (seen at its first batch, after the module's epoch hook)."""

    def __init__(self):
        self.by_epoch = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0:
            names = {name for name, p in pl_module.named_parameters() if p.requires_grad}
            self.by_epoch[trainer.current_epoch] = names


class EpochStartState(Callback):
    """The module's state at the start of each epoch."""

    def __init__(self):
        self.by_epoch = {}

    def on_train_epoch_start(self, trainer, pl_module):
        self.by_epoch[trainer.current_epoch] = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.__name__)
def test_fit_then_test_on_one_client(method):
    lightning.seed_everything(0, verbose=False)
    dm = client()
    module = method(hidden_dims=[16], lr=0.2)
    losses = EpochLosses()
    trainer = plain_trainer(epochs=3, callbacks=[losses])
    trainer.fit(module, dm)

    # layers sized from the client's description
    assert module.client_spec == dm.spec
    assert module.head.out_features == 3
    assert first_linear(module).in_features == DIM
    assert module(torch.zeros(2, DIM)).shape == (2, 3)

    # it learned
    assert len(losses.epochs) == 3
    assert all(math.isfinite(x) for x in losses.epochs)
    assert losses.epochs[-1] < losses.epochs[0]
    assert math.isfinite(float(trainer.callback_metrics["train/loss"]))
    assert 0.0 <= float(trainer.callback_metrics["val/acc"]) <= 1.0

    (results,) = trainer.test(module, dm, verbose=False)
    assert set(results) >= {"test/acc", "test/loss"}
    assert 0.0 <= results["test/acc"] <= 1.0
    assert math.isfinite(results["test/loss"])
    assert results["test/acc"] > 0.6  # well-separated blobs: far above chance (1/3) after 3 epochs


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.__name__)
def test_test_metrics_match_a_manual_evaluation(method):
    lightning.seed_everything(1, verbose=False)
    dm = client(seed=1)
    module = method(hidden_dims=[16], lr=0.2)
    trainer = plain_trainer(epochs=1)
    trainer.fit(module, dm)
    (results,) = trainer.test(module, dm, verbose=False)
    x, y = dm.test_dataset.x, dm.test_dataset.y
    module.eval()
    with torch.no_grad():
        logits = module(x)
    assert results["test/acc"] == pytest.approx((logits.argmax(1) == y).float().mean().item(), abs=1e-6)
    assert results["test/loss"] == pytest.approx(nn.functional.cross_entropy(logits, y).item(), rel=1e-5)


def test_fedrep_alternates_head_and_body_epochs():
    lightning.seed_everything(0, verbose=False)
    module = FedRep(hidden_dims=[16], head_epochs=2)
    seen = TrainableNames()
    plain_trainer(epochs=4, callbacks=[seen]).fit(module, client())
    head = {name for name, _ in module.named_parameters() if name.startswith("head.")}
    body = {name for name, _ in module.named_parameters() if name.startswith("body.")}
    assert head
    assert body
    assert seen.by_epoch == {0: head, 1: head, 2: body, 3: head}
    assert all(p.requires_grad for p in module.parameters())  # nothing stays frozen after fit


def test_fedrep_phases_freeze_what_they_do_not_train():
    lightning.seed_everything(0, verbose=False)
    module = FedRep(hidden_dims=[16], lr=0.5, head_epochs=1)
    snapshot = EpochStartState()
    plain_trainer(epochs=2, callbacks=[snapshot]).fit(module, client())
    after_head_epoch = snapshot.by_epoch[1]
    changed = {k for k, v in after_head_epoch.items() if not torch.equal(v, snapshot.by_epoch[0][k])}
    assert changed
    assert all(k.startswith("head.") for k in changed)
    changed = {k for k, v in module.state_dict().items() if not torch.equal(v, after_head_epoch[k])}
    assert changed
    assert all(k.startswith("body.") for k in changed)


@pytest.mark.parametrize("method", [LocalOnly, FedAvg], ids=lambda m: m.__name__)
def test_single_phase_methods_train_every_parameter(method):
    module = method(hidden_dims=[16])
    seen = TrainableNames()
    plain_trainer(epochs=2, callbacks=[seen]).fit(module, client())
    everything = {name for name, _ in module.named_parameters()}
    assert seen.by_epoch == {0: everything, 1: everything}


def test_a_plain_datamodule_without_spec_is_refused():
    x, y = torch.randn(16, DIM), torch.arange(16) % 3
    dm = lightning.LightningDataModule.from_datasets(train_dataset=TensorDataset(x, y), batch_size=4)
    with pytest.raises(ValueError, match="ClientDataModule"):
        plain_trainer(epochs=1).fit(FedAvg(hidden_dims=[8]), dm)


def test_a_plain_dataloader_without_spec_is_refused():
    loader = DataLoader(TensorDataset(torch.randn(16, DIM), torch.arange(16) % 3), batch_size=4)
    with pytest.raises(ValueError, match="ClientDataModule"):
        plain_trainer(epochs=1).fit(LocalOnly(hidden_dims=[8]), train_dataloaders=loader)


def test_a_module_given_a_spec_trains_on_plain_loaders():
    dm = client()
    module = LocalOnly(hidden_dims=[8])
    module.setup_client(dm.spec)
    plain_trainer(epochs=1).fit(module, train_dataloaders=dm.train_dataloader())
    assert module.head.out_features == 3
    assert first_linear(module).in_features == DIM


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.__name__)
def test_configure_model_is_idempotent(method):
    module = method(hidden_dims=[8])
    module.setup_client(client().spec)
    module.configure_model()
    params = dict(module.named_parameters())
    values = {name: p.detach().clone() for name, p in params.items()}
    module.configure_model()
    again = dict(module.named_parameters())
    assert params.keys() == again.keys()
    assert all(again[name] is params[name] for name in params)
    assert all(torch.equal(again[name], values[name]) for name in params)
    assert module.evaluation_metrics("val") is module.evaluation_metrics("val")
    assert module.evaluation_metrics("test") is not module.evaluation_metrics("val")
    assert not any("metric" in name for name, _ in module.named_modules())  # outside the module tree


def test_configure_model_without_a_spec_names_setup_client():
    with pytest.raises(RuntimeError, match="setup_client"):
        FedAvg(hidden_dims=[8]).configure_model()
