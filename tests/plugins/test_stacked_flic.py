"""FLIC in stacks (``stack_clients``): pre-training, the anchor copy's optimizer and anchor samples as sequentially."""

import pytest
import torch

from fedhet.core.statistics import GLOBAL_MEANS
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FLIC, HetFedRep
from fedhet.plugins import FederatedTrainer
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
}


def two_dimensions():
    """The test federation's clients with 4 or 6 features: two architectures, so two families of stacks."""
    clients = [make_client(cid, n, seed, dim=6 if seed % 2 else 4) for seed, (cid, n) in enumerate(SIZES.items())]
    return FederatedDataModule(clients)


@pytest.mark.parametrize("case", list(CASES))
def test_stacked_flic_equals_sequential(tmp_path, monkeypatch, case):
    sequential = fit(tmp_path / "seq", CASES[case](), two_dimensions())
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", CASES[case](), two_dimensions(), stack_clients=3)
    # Adam divides by the root of tiny second moments: summation-order differences of 1e-7 grow to ~4e-6 over three
    # rounds here; anchor noise drawn out of order moves the personal parameters by ~3e-3
    close = {"rtol": 1e-4, "atol": 1e-5}
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
        assert (stacked.server_state.statistics[GLOBAL_MEANS] - start).abs().max() > 1e-3  # the copies trained


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"anchor_update": "paper"}, "anchor_update='paper' takes its anchor step, with anchor samples, after"),
        ({"anchor_stats": "sampled"}, "anchor_stats='sampled' draws anchor samples inside the W2 term"),
        ({"embedding_dropout": 0.5}, r"its layer 'body.embed.3' \(Dropout\) draws random numbers"),
    ],
    ids=["paper-anchor-step", "sampled-anchor-statistics", "dropout"],
)
def test_flic_options_that_cannot_stack_are_refused(kwargs, reason):
    trainer = FederatedTrainer(accelerator="cpu", enable_progress_bar=False, logger=False, stack_clients=4)
    with pytest.raises(ValueError, match=f"but FLIC cannot train clients in stacks: {reason}"):
        trainer.fit(FLIC(**SMALL, pretrain_epochs=1, **kwargs), two_dimensions())
    assert trainer.history == []
