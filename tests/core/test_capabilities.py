"""Capabilities are declared types (fedhet.core), not probed names: stacking and the FedProx penalty check them."""

import pytest
import torch

from fedhet.core import BatchLossModule, FederatedModuleProtocol, LocalPhase, PenalisedModule, StackableModule, Stacking
from fedhet.modules import FLIC, FedAvg, FederatedModule, FedProx
from fedhet.plugins.clients.stacked import stacking_refusal
from tests.conftest import make_client


def built(module, client=None):
    client = client or make_client("a", 24, 0)
    module.setup_client(client.spec)
    module.configure_model()
    return module


class NoPerSampleLosses(FederatedModule):
    """The contract alone: trains, but declares no per-sample losses."""

    def configure_model(self):
        self.net = torch.nn.Linear(6, 3)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class PreparesFirst(FedAvg):
    def preparation_phases(self):
        return [LocalPhase("warm", ("head.*",), epochs=1)]


def test_stacking_asks_for_the_declared_capability():
    assert isinstance(built(FedAvg(hidden_dims=[4])), StackableModule)
    plain = built(NoPerSampleLosses())
    assert isinstance(plain, FederatedModuleProtocol)
    assert not isinstance(plain, StackableModule)
    assert stacking_refusal(plain) == "it has no sample_losses method (the per-sample losses of a batch)"
    assert stacking_refusal(built(FedAvg(hidden_dims=[4]))) is None


class OwnFLICStep(FLIC):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * 2


def test_a_subclass_that_changes_the_local_work_is_refused_by_name():
    flic = built(FLIC(latent_dim=4, embedding_hidden_dims=[8], pretrain_epochs=1))
    assert isinstance(flic, BatchLossModule)  # its loss is masked_loss, its training_step the same maths
    assert stacking_refusal(flic) is None
    own = built(OwnFLICStep(latent_dim=4, embedding_hidden_dims=[8], pretrain_epochs=1))
    assert stacking_refusal(own).startswith("OwnFLICStep overrides training_step")
    assert stacking_refusal(built(PreparesFirst(hidden_dims=[4]))) == (
        "PreparesFirst defines preparation_phases and its stacking names no client_attributes"
    )


def test_the_proximal_penalty_is_a_declared_capability():
    prox, avg = built(FedProx(hidden_dims=[4], mu=0.1)), built(FedAvg(hidden_dims=[4]))
    assert isinstance(prox, PenalisedModule)
    assert prox.has_local_penalty
    assert not avg.has_local_penalty


def test_the_contract_names_optimizer_reuse():
    module = built(NoPerSampleLosses())
    assert module.reuse_optimizers is False
    assert built(FedAvg(hidden_dims=[4])).reuse_optimizers is True


def test_a_round_dependent_schedule_is_a_declared_capability():
    from fedhet.callbacks import AnchorUpdate
    from fedhet.core import RoundAware

    flic = built(FLIC(latent_dim=4, embedding_hidden_dims=[8], variant="hl", rep_start_round=2, pretrain_epochs=1))
    assert isinstance(flic, RoundAware)
    assert not isinstance(built(FedAvg(hidden_dims=[4])), RoundAware)

    class Run:
        rounds = 5

    AnchorUpdate().on_client_fit_start(Run(), round_idx=1, client_id="a", module=flic)
    assert [p.name for p in flic.local_phases()] == ["local"]  # round 1 < rep_start_round: no representation phase
    AnchorUpdate().on_client_fit_start(Run(), round_idx=4, client_id="a", module=flic)
    assert flic.final_round
    AnchorUpdate().on_client_fit_start(Run(), round_idx=0, client_id="a", module=built(FedAvg(hidden_dims=[4])))


class DrawsNoise(FedAvg):
    """A batch loss with a draw of its own: the masked mean cross-entropy plus one standard normal number."""

    def stacking(self):
        return Stacking(draws=lambda batch, phase: (*batch, torch.randn(len(batch[1]), 1)))

    def masked_loss(self, batch, mask):
        x, y, noise = batch
        losses = torch.nn.functional.cross_entropy(self(x), y, reduction="none")
        return (losses * mask).sum() / mask.sum() + noise[0, 0]


def test_the_base_training_step_is_the_declared_loss():
    client = make_client("a", 24, 0)
    x, y = next(iter(client.train_dataloader()))
    avg = built(FedAvg(hidden_dims=[4]), client)
    expected = torch.nn.functional.cross_entropy(avg(x), y)
    torch.testing.assert_close(avg.training_step((x, y), 0), expected)
    noisy = built(DrawsNoise(hidden_dims=[4]), client)
    noisy.load_state_dict(avg.state_dict())
    torch.manual_seed(3)
    loss = noisy.training_step((x, y), 0)
    torch.manual_seed(3)
    torch.testing.assert_close(loss, expected + torch.randn(len(y), 1)[0, 0])
    assert isinstance(noisy, BatchLossModule)
    assert stacking_refusal(noisy) is None
    with pytest.raises(NotImplementedError, match="NoLoss defines neither sample_losses nor training_step"):
        NoLoss().training_step((x, y), 0)


class NoLoss(FederatedModule):
    pass
