"""FLIC in stacks (``stack_clients``): pre-training, the anchor copy's optimizer and anchor samples as sequentially."""

import pytest
import torch

from fedhet.callbacks.flic import GLOBAL_MEANS
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FLIC, HetFedRep
from fedhet.plugins import FederatedTrainer, Processes, Reporting, UniformSampler
from tests.conftest import make_client
from tests.plugins.test_stacked import ROUNDS, SIZES, StackSpy, assert_same_federation, fit

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


TOLERANCES = {
    # Adam divides by the root of tiny second moments: float32 summation-order differences of 1e-7 grow to ~4e-6 over
    # three rounds; anchor noise drawn out of order moves the personal parameters by ~3e-3
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
    # the same runs in float64 agree to ~1e-16: both paths compute the same maths
    torch.float64: {"rtol": 1e-10, "atol": 1e-12},
}


# Learned covariances are compared in float64 only: the Bures term's gradient at the singular class covariances of
# small batches (8 rows, k = 8) amplifies float32 rounding until a float32 run is not a function of its maths (the
# sequential path alone, float32 against float64: personal parameters 0.76 apart after three rounds), so two float32
# runs agree or not by chance; in float64 both paths agree to 1e-12.
# Re-alignment is compared in float64 only too: its extra alignment epoch at a pre-training batch of 5 rows amplifies
# float32 summation-order differences by an amount that depends on the CPU's kernels (on one machine 2.3e-4 on a
# shared bias after three rounds, 20x the float32 tolerance; 0 on another); in float64 both paths agree to 1e-12.
# The paper's anchor step likewise: with every client's head starting from one template (personal_init "shared"),
# its anchor step at lr 0.5 carried a float32 summation-order difference to 5.7e-5 on one embedding weight after three
# rounds (1 of 96 elements past the tolerance); in float64 both paths agree to 1e-12.
FLOAT64_ONLY = ("learned-covariance", "hl-realign", "paper-anchor-step")
PAIRS = [
    pytest.param(case, dtype, id=f"{str(dtype).removeprefix('torch.')}-{case}")
    for dtype in TOLERANCES
    for case in CASES
    if not (case in FLOAT64_ONLY and dtype is torch.float32)
]


@pytest.fixture
def close(request):
    """Tolerances for a federation built in the parameter's dtype (the default dtype of data, modules and anchors)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    yield TOLERANCES[request.param]
    torch.set_default_dtype(default)


def two_dimensions():
    """The test federation's clients with 4 or 6 features: two architectures, so two families of stacks."""
    clients = [make_client(cid, n, seed, dim=6 if seed % 2 else 4) for seed, (cid, n) in enumerate(SIZES.items())]
    return FederatedDataModule(clients)


@pytest.mark.parametrize(("case", "close"), PAIRS, indirect=["close"])
def test_stacked_flic_equals_sequential(tmp_path, monkeypatch, case, close):
    sequential = fit(tmp_path / "seq", CASES[case](), two_dimensions())
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", CASES[case](), two_dimensions(), stack_clients=3)
    assert next(iter(stacked.store.values())).personal["head.weight"].dtype == torch.get_default_dtype()
    assert_same_federation(sequential, stacked, **close)
    torch.testing.assert_close(stacked.server_state.statistics, sequential.server_state.statistics, **close)
    for mine, theirs in zip(stacked.history, sequential.history, strict=True):
        assert mine["val/acc_mean"] == pytest.approx(theirs["val/acc_mean"], rel=1e-6)
        assert mine.keys() >= {key for key in theirs if "pretrain" in key}
        for key in (key for key in theirs if "pretrain" in key):
            assert mine[key] == pytest.approx(theirs[key], rel=1e-5)
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


def test_sampled_flic_clients_pretraining_and_realigning_share_stacks(tmp_path, monkeypatch):
    """With half the clients a round, a round mixes first participations (pre-training) and later ones (re-alignment);
    both run before the clients join the same stacks. In float64 (in float32 Adam grows rounding to 2e-5 here)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _sampled_rounds(tmp_path, monkeypatch)
    finally:
        torch.set_default_dtype(default)


def _sampled_rounds(tmp_path, monkeypatch):
    kwargs = {"sampler": UniformSampler(fraction=0.5), "rounds": 4}

    def make():
        return FLIC(**SMALL, variant="hl", pretrain_epochs=2, realign_epochs=1)

    sequential = fit(tmp_path / "seq", make(), two_dimensions(), **kwargs)
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", make(), two_dimensions(), stack_clients=4, **kwargs)
    close = TOLERANCES[torch.float64]
    assert_same_federation(sequential, stacked, **close)
    torch.testing.assert_close(stacked.server_state.statistics, sequential.server_state.statistics, **close)
    assert sum(spy.sizes) == 4 * 4
    pretraining = [h.get("train/pretrain_loss_mean") for h in stacked.history]
    assert pretraining == pytest.approx([h.get("train/pretrain_loss_mean") for h in sequential.history], rel=1e-5)
