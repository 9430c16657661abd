"""Robust aggregation in the real round loop: one client uploads its weights scaled by 100.

The poisoned upload passes the server's checks (it is finite and on time). FedAvg's weighted mean follows it: the
global parameters grow about twentyfold per round and the honest clients' accuracy falls. The coordinate-wise median
and the trimmed mean leave it out and stay near the clean run.
"""

from pathlib import Path

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.cli import FederatedCLI, main
from fedhet.core import ClientUpdate
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedAvg
from fedhet.plugins import (
    Aggregator,
    Checkpointing,
    CoordinateMedian,
    FederatedTrainer,
    PlainUpdate,
    Processes,
    Reporting,
    TrimmedMean,
    WeightedMean,
)
from tests.conftest import make_client

HONEST = ("a", "b", "c", "d")
ATTACKER = "e"
CONFIGS = Path(__file__).parents[2] / "configs" / "fedavg"


class ScaleUpload(FederatedCallback):
    """Multiplies the floating shared tensors that ``client_id`` uploads by ``factor`` (a poisoned client)."""

    def __init__(self, client_id: str, factor: float) -> None:
        self.client_id = client_id
        self.factor = factor

    def on_client_fit_end(self, client_id: str, update: ClientUpdate) -> None:
        if client_id == self.client_id:
            for name, value in update.shared.items():
                if value.is_floating_point():
                    update.shared[name] = value * self.factor  # a new tensor: the client's own state is untouched


def run(tmp_path, aggregator: Aggregator, attacked: bool) -> tuple[float, float]:
    """10 rounds of FedAvg on five clients; returns the honest clients' mean val accuracy and the global norm."""
    clients = [make_client(cid, 64, seed) for seed, cid in enumerate(HONEST)]
    clients.append(make_client(ATTACKER, 64, 4, classes=(2,)))  # the poisoner trains on one class of its choice
    trainer = FederatedTrainer(
        rounds=10,
        processes=Processes(accelerator="cpu"),
        checkpointing=Checkpointing(every=0),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path),
        seed=0,
        server_update=aggregator,
        callbacks=[ScaleUpload(ATTACKER, 100.0)] if attacked else [],
    )
    trainer.fit(FedAvg(hidden_dims=[8], lr=0.1), FederatedDataModule(clients))
    metrics = trainer.history[-1]
    accuracy = sum(metrics[f"val/acc/{cid}"] for cid in HONEST) / len(HONEST)
    norm = torch.linalg.vector_norm(torch.cat([v.double().flatten() for v in trainer.server_state.shared.values()]))
    return accuracy, norm.item()


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[float, float]:
    return run(tmp_path_factory.mktemp("clean"), WeightedMean(), attacked=False)


def test_weighted_mean_is_wrecked_by_one_client_scaled_by_100(tmp_path, clean):
    clean_accuracy, clean_norm = clean
    accuracy, norm = run(tmp_path, WeightedMean(), attacked=True)
    assert norm > 1e6 * clean_norm
    assert accuracy < clean_accuracy - 0.25


@pytest.mark.parametrize("aggregator", [CoordinateMedian(), TrimmedMean(beta=0.2)], ids=["median", "trimmed"])
def test_robust_aggregators_stay_near_the_clean_run(tmp_path, clean, aggregator):
    clean_accuracy, clean_norm = clean
    assert run(tmp_path / "clean", aggregator, attacked=False)[0] >= clean_accuracy - 0.1  # no cost without attack
    accuracy, norm = run(tmp_path / "attacked", aggregator, attacked=True)
    assert norm < 2 * clean_norm
    assert accuracy >= clean_accuracy - 0.1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-c", str(CONFIGS / "digits_robust.yaml")], TrimmedMean),
        (
            ["-c", str(CONFIGS / "digits.yaml"), "--trainer.server_update", "fedhet.plugins.CoordinateMedian"],
            CoordinateMedian,
        ),
    ],
    ids=["shipped-config", "command-line"],
)
def test_selected_from_the_config(tmp_path, args, expected):
    cli = FederatedCLI(args=[*args, "--trainer.default_root_dir", str(tmp_path)], run=False)
    update = cli.trainer.server_update
    assert isinstance(update, PlainUpdate)  # an aggregator is the shorthand of a plain server update
    assert type(update.aggregator) is expected
    assert getattr(update.aggregator, "beta", 0.2) == 0.2


def test_a_bad_beta_is_refused_naming_the_field(tmp_path, capsys):
    args = ["fit", "-c", str(CONFIGS / "digits_robust.yaml"), "--trainer.server_update.beta", "0.5"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--trainer.default_root_dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "TrimmedMean: field 'beta' must be a fraction in [0, 0.5), got 0.5" in capsys.readouterr().err


@pytest.mark.kernels
@pytest.mark.distributed
def test_two_processes_equal_one(tmp_path):
    from tests.integrations.test_distributed import run_cli

    robust = ["--trainer.server_update", "fedhet.plugins.TrimmedMean", "--trainer.server_update.beta", "0.25"]
    one = run_cli(tmp_path, "one", "FedAvg", 3, 1, *robust)
    assert len(one) == 3
    assert run_cli(tmp_path, "two", "FedAvg", 3, 2, *robust) == one
