"""Soak: 1,000 rounds over 100 small clients with flat memory."""

import gc
from pathlib import Path

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedRep
from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting, UniformSampler

pytestmark = pytest.mark.slow

ROUNDS = 1_000
CLIENTS = 100
WARM_UP = 200  # rounds before the baseline: every client has been sampled (and its personal state stored) by then
DIM, HIDDEN = 32, 64  # a shared body of 2,112 floats: a leak of one upload per client fit would show (see below)
RSS_GROWTH_BOUND_MIB = 8.0  # the history of 1,000 rounds of metrics is ~1 MiB; the rest is allocator noise


def rss_mib() -> float:
    """This process's resident set size, from /proc/self/status (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class RssProbe(FederatedCallback):
    """Records the RSS every 100 rounds, after a garbage collection."""

    def __init__(self):
        self.rss = {}

    def on_round_end(self, round_idx):
        if (round_idx + 1) % 100 == 0:
            gc.collect()
            self.rss[round_idx + 1] = rss_mib()


def soak_federation() -> FederatedDataModule:
    g = torch.Generator().manual_seed(0)
    data = {}
    for i in range(CLIENTS):
        n = 12 + i % 9
        y = torch.randint(3, (n,), generator=g)
        data[f"c{i:03d}"] = (2.0 * torch.eye(3, DIM)[y] + torch.randn(n, DIM, generator=g), y)
    return FederatedDataModule.from_tensors(data, num_classes=3, batch_size=8, val_fraction=0.25)


def test_thousand_rounds_hundred_clients_flat_memory(tmp_path):
    probe = RssProbe()
    trainer = FederatedTrainer(
        rounds=ROUNDS,
        local_steps=1,
        sampler=UniformSampler(fraction=0.1),
        processes=Processes(accelerator="cpu"),
        checkpointing=Checkpointing(every=0),
        reporting=Reporting(eval_every=ROUNDS // 2, progress_bar=False, per_client=False),
        logger=False,
        default_root_dir=str(tmp_path),
        callbacks=[probe],
    )
    trainer.fit(FedRep(hidden_dims=[HIDDEN], head_epochs=1), soak_federation())

    assert len(trainer.history) == ROUNDS
    assert sum(m["clients/failed"] for m in trainer.history) == 0
    assert len(trainer.store) == CLIENTS
    # the bound is tight enough to catch a leak of every upload after the warm-up
    fits_after_warm_up = sum(m["clients/participants"] for m in trainer.history[WARM_UP:])
    upload_mib = trainer.history[-1]["comm/bytes_up"] / trainer.history[-1]["clients/participants"] / 2**20
    assert fits_after_warm_up * upload_mib > 4 * RSS_GROWTH_BOUND_MIB
    growth = probe.rss[ROUNDS] - probe.rss[WARM_UP]
    print(f"RSS (MiB) every 100 rounds: {probe.rss}; growth after round {WARM_UP}: {growth:.2f} MiB")
    assert growth < RSS_GROWTH_BOUND_MIB, probe.rss
