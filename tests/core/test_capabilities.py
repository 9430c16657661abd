"""Capabilities are declared types (fedhet.core), not probed names: stacking and the FedProx penalty check them."""

import torch

from fedhet.core import BatchLossModule, FederatedModuleProtocol, LocalPhase, PenalisedModule, StackableModule
from fedhet.modules import FLIC, FedAvg, FederatedModule, FedProx
from fedhet.plugins.stacked import stacking_refusal
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
