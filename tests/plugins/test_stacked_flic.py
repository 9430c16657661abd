"""FLIC in stacks (``stack_clients``): pre-training, the anchor copy's optimizer and anchor samples as sequentially."""

import pytest
import torch

from fedhet.callbacks.flic import GLOBAL_MEANS
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FLIC, HetFedRep
from fedhet.plugins import FederatedTrainer, Processes, Reporting, UniformSampler
from tests.conftest import make_client
from tests.plugins.test_stacked import (
    ROUNDS,
    SIZES,
    StackSpy,
    assert_same_federation,
    assert_stacked_within_rounding,
    fit,
)
from tests.rounding import FLOAT64

#: float32 equality across code paths: also run under ATEN_CPU_CAPABILITY=default (`.ci/run`)
pytestmark = pytest.mark.kernels

SMALL = {"latent_dim": 8, "embedding_hidden_dims": [16], "hidden_width": 12, "anchor_std": 3.0}

CASES = {
    "class": lambda: FLIC(**SMALL, pretrain_epochs=2),
    "hl-realign": lambda: FLIC(**SMALL, variant="hl", pretrain_epochs=2, realign_epochs=1, pretrain_batch_size=5),
    "learned-covariance": lambda: FLIC(
        **SMALL, pretrain_epochs=1, learn_covariance=True, anchor_samples=4, anchor_lr=1e-2, weight_decay=1e-3
    ),
    "hetfedrep": lambda: HetFedRep(**SMALL),
    # the reference code's sampled statistics: anchor samples per row in the W2 terms, the copy's objective too
    "sampled-statistics": lambda: FLIC(**SMALL, variant="hl", pretrain_epochs=1, anchor_stats="sampled"),
    # the paper's anchor step after training (Alg. S2) draws anchor samples where the training draws ended
    "paper-anchor-step": lambda: FLIC(
        **SMALL, variant="hl", pretrain_epochs=1, anchor_update="paper", anchor_samples=3, anchor_lr=0.5
    ),
}


DTYPES = [pytest.param(dtype, id=str(dtype).removeprefix("torch.")) for dtype in (torch.float32, torch.float64)]


def two_dimensions(nudge=False):
    """The test federation's clients with 4 or 6 features: two architectures, so two families of stacks."""
    clients = [
        make_client(cid, n, seed, dim=6 if seed % 2 else 4, nudge=nudge) for seed, (cid, n) in enumerate(SIZES.items())
    ]
    return FederatedDataModule(clients)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_stacked_flic_equals_sequential(tmp_path, monkeypatch, case, dtype):
    """In float64 to rounding; in float32 within the rounding spread's bound (:mod:`tests.rounding`): Adam divides by
    the root of tiny second moments, a learned covariance's Bures gradient at the singular covariances of small
    batches, a re-alignment epoch of 5-row batches and the paper's anchor step at lr 0.5 all amplify float32 rounding
    by amounts that depend on the CPU's kernels (on one machine 2.3e-4 on a shared bias after three rounds, 0 on
    another; on an AMD EPYC 3.0e-5 on an embedding weight of the sampled-statistics case)."""
    torch.set_default_dtype(dtype)  # of data, modules and anchors; conftest puts it back
    sequential = fit(tmp_path / "seq", CASES[case](), two_dimensions())
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", CASES[case](), two_dimensions(), stack_clients=3)
    assert next(iter(stacked.store.values())).personal["head.weight"].dtype == dtype
    if dtype is torch.float32:
        assert_stacked_within_rounding(tmp_path, CASES[case], two_dimensions, sequential, stacked)
    else:
        assert_same_federation(sequential, stacked)
        torch.testing.assert_close(stacked.server_state.statistics, sequential.server_state.statistics, **FLOAT64)
        for mine, theirs in zip(stacked.history, sequential.history, strict=True):
            assert mine["val/acc_mean"] == pytest.approx(theirs["val/acc_mean"], rel=1e-6)
            assert mine.keys() >= {key for key in theirs if "pretrain" in key}
            for key in (key for key in theirs if "pretrain" in key):
                assert mine[key] == pytest.approx(theirs[key], rel=1e-10)
    # each round: 4 clients of each dimension, grouped by steps per epoch into stacks of up to 3
    assert sum(spy.sizes) == len(SIZES) * ROUNDS
    assert max(spy.sizes) == 3
    assert spy.padded
    if case != "hetfedrep":
        assert "train/pretrain_loss_mean" in stacked.history[0]
        assert all(bool(state.personal["pretrained"]) for state in stacked.store.values())
        start = FLIC(**SMALL).anchor_std * torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
        assert (stacked.server_state.statistics[GLOBAL_MEANS] - start).abs().max() > 1e-3  # the anchors moved


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"embedding_dropout": 0.5}, r"its layer 'body.embed.3' \(Dropout\) draws random numbers"),
    ],
    ids=["dropout"],
)
def test_flic_options_that_cannot_stack_are_refused(kwargs, reason, tmp_path):
    trainer = FederatedTrainer(
        processes=Processes(accelerator="cpu", stack_clients=4),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path),
    )
    with pytest.raises(ValueError, match=f"but FLIC cannot train clients in stacks: {reason}"):
        trainer.fit(FLIC(**SMALL, pretrain_epochs=1, **kwargs), two_dimensions())
    assert trainer.history == []


def test_sampled_flic_clients_pretraining_and_realigning_share_stacks(float64, tmp_path, monkeypatch):
    """With half the clients a round, a round mixes first participations (pre-training) and later ones (re-alignment);
    both run before the clients join the same stacks. In float64 (in float32 Adam grows rounding to 2e-5 here)."""
    kwargs = {"sampler": UniformSampler(fraction=0.5), "rounds": 4}

    def make():
        return FLIC(**SMALL, variant="hl", pretrain_epochs=2, realign_epochs=1)

    sequential = fit(tmp_path / "seq", make(), two_dimensions(), **kwargs)
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", make(), two_dimensions(), stack_clients=4, **kwargs)
    assert_same_federation(sequential, stacked)
    torch.testing.assert_close(stacked.server_state.statistics, sequential.server_state.statistics, **FLOAT64)
    assert sum(spy.sizes) == 4 * 4
    pretraining = [h.get("train/pretrain_loss_mean") for h in stacked.history]
    assert pretraining == pytest.approx([h.get("train/pretrain_loss_mean") for h in sequential.history], rel=1e-5)
