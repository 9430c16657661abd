"""AnchorUpdate and KernelSync: server steps on hand-made uploads, checkpoints, and a resumed federation."""

import pytest
import torch

from fedhet.callbacks import AnchorUpdate, KernelSync
from fedhet.callbacks.fedhenn import GLOBAL_KERNEL, KERNEL
from fedhet.callbacks.flic import ANCHOR_COUNTS, ANCHOR_FACTORS, ANCHOR_MEANS, GLOBAL_FACTORS, GLOBAL_MEANS
from fedhet.core import ClientUpdate, ServerState
from fedhet.functional import gaussian_barycenter
from fedhet.modules import FLIC
from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting
from tests.callbacks.helpers import TRAINER, roundtrip


def upload(cid, means, samples=10, counts=None, factors=None):
    stats = {ANCHOR_MEANS: means}
    if counts is not None:
        stats[ANCHOR_COUNTS] = counts
    if factors is not None:
        stats[ANCHOR_FACTORS] = factors
    return ClientUpdate(cid, samples, {}, stats)


def test_uniform_weights_give_the_plain_mean_of_the_participants():
    means = torch.randn(3, 4, 2)
    server = ServerState()
    step = AnchorUpdate()
    step.on_aggregate_end(TRAINER, 0, server, [upload(c, means[i], samples=10 * (i + 1)) for i, c in enumerate("abc")])
    assert torch.allclose(server.statistics[GLOBAL_MEANS], means.mean(0), atol=1e-6)
    assert GLOBAL_FACTORS not in server.statistics
    assert step.drift == 0.0
    step.on_aggregate_end(TRAINER, 1, server, [upload("a", means[0] + 1.0)])
    assert torch.allclose(server.statistics[GLOBAL_MEANS], means[0] + 1.0)
    assert step.drift == pytest.approx(float((means[0] + 1.0 - means.mean(0)).norm(dim=-1).mean()), rel=1e-5)


def test_sample_weights_and_holders_only():
    m1, m2 = torch.zeros(3, 2), torch.ones(3, 2)
    counts1, counts2 = torch.tensor([5.0, 0.0, 0.0]), torch.tensor([5.0, 5.0, 0.0])
    server = ServerState()
    AnchorUpdate(weighting="samples").on_aggregate_end(
        TRAINER, 0, server, [upload("a", m1, 10, counts1), upload("b", m2, 30, counts2)]
    )
    assert torch.allclose(server.statistics[GLOBAL_MEANS], torch.full((3, 2), 0.75))
    AnchorUpdate(holders_only=True).on_aggregate_end(
        TRAINER, 0, server, [upload("a", m1, 10, counts1), upload("b", m2, 30, counts2)]
    )
    # class 0: both hold it; class 1: only b; class 2: nobody, equal weights
    assert torch.allclose(server.statistics[GLOBAL_MEANS], torch.tensor([[0.5, 0.5], [1.0, 1.0], [0.5, 0.5]]))


def test_learned_covariances_bures_barycenter_and_cholesky_mean():
    d1, d2 = torch.tensor([1.0, 4.0]), torch.tensor([9.0, 1.0])
    f1, f2 = torch.diag(d1.sqrt()).expand(2, 2, 2), torch.diag(d2.sqrt()).expand(2, 2, 2)
    updates = [upload("a", torch.zeros(2, 2), factors=f1), upload("b", torch.ones(2, 2), factors=f2)]
    server = ServerState()
    AnchorUpdate().on_aggregate_end(TRAINER, 0, server, updates)
    factors = server.statistics[GLOBAL_FACTORS]
    expected = torch.diag(((d1.sqrt() + d2.sqrt()) / 2) ** 2)  # commuting covariances: mean of the square roots
    assert torch.allclose(factors @ factors.mT, expected.expand(2, 2, 2), atol=1e-5)
    assert torch.equal(factors, factors.tril())
    AnchorUpdate(covariance_aggregation="cholesky_mean").on_aggregate_end(TRAINER, 0, server, updates)
    assert torch.allclose(server.statistics[GLOBAL_FACTORS], (f1 + f2) / 2)


def test_full_covariance_barycenter_matches_the_functional():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 2, 4, 4, generator=g)
    factors = torch.linalg.cholesky(a @ a.mT + torch.eye(4))
    means = torch.randn(3, 2, 4, generator=g)
    server = ServerState()
    AnchorUpdate().on_aggregate_end(
        TRAINER, 0, server, [upload(c, means[i], factors=factors[i]) for i, c in enumerate("abc")]
    )
    _, covariance = gaussian_barycenter(means, torch.ones(3, 2), factors @ factors.mT)
    out = server.statistics[GLOBAL_FACTORS]
    assert torch.allclose(out @ out.mT, covariance, atol=1e-4)


def test_state_survives_a_weights_only_checkpoint():
    step = AnchorUpdate()
    step.on_aggregate_end(TRAINER, 0, ServerState(), [upload("a", torch.randn(3, 2))])
    restored = AnchorUpdate()
    restored.load_state_dict(roundtrip(step.state_dict()))
    assert torch.equal(restored.means, step.means)
    sync = KernelSync()
    server = ServerState()
    kernels = torch.randn(2, 5, 5)
    updates = [ClientUpdate(c, 1, {}, {KERNEL: kernels[i]}) for i, c in enumerate("ab")]
    sync.on_aggregate_end(TRAINER, 0, server, updates)
    sync.on_aggregate_end(TRAINER, 1, server, [ClientUpdate("a", 1, {}, {KERNEL: kernels[1]})])
    assert torch.allclose(server.statistics[GLOBAL_KERNEL], kernels[1])  # a's latest kernel and b's
    other = KernelSync()
    other.load_state_dict(roundtrip(sync.state_dict()))
    assert set(other.kernels) == {"a", "b"}


@pytest.mark.kernels
def test_resumed_federation_matches_an_uninterrupted_one(tmp_path, tiny_federation):
    def trainer(root, rounds):
        return FederatedTrainer(
            rounds=rounds,
            processes=Processes(accelerator="cpu"),
            checkpointing=Checkpointing(every=1),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=str(root),
        )

    def model():
        return FLIC(latent_dim=4, embedding_hidden_dims=[8], anchor_std=2.0, pretrain_epochs=1, anchor_update="code")

    straight = trainer(tmp_path / "straight", 3)
    straight.fit(model(), tiny_federation)
    trainer(tmp_path / "resumed", 2).fit(model(), tiny_federation)
    resumed = trainer(tmp_path / "resumed", 3)
    resumed.fit(model(), tiny_federation, ckpt_path="last")
    assert torch.equal(resumed.server_state.statistics[GLOBAL_MEANS], straight.server_state.statistics[GLOBAL_MEANS])
    callback = next(cb for cb in resumed.callbacks if isinstance(cb, AnchorUpdate))
    assert torch.equal(callback.means, straight.server_state.statistics[GLOBAL_MEANS])
    assert resumed.history[-1]["val/acc_mean"] == straight.history[-1]["val/acc_mean"]
