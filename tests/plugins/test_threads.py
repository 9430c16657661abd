"""A run computes on the threads its config names (1 by default), whatever the process ran on before it."""

from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_info

from fedhet.callbacks import FederatedCallback
from fedhet.cli import FederatedCLI
from fedhet.modules import FedAvg
from fedhet.plugins import FederatedTrainer
from fedhet.plugins.processes.threads import pin_threads
from tests.conftest import TEST_THREADS
from tests.trainer_options import trainer_options

# these tests check the threads a run asks for, which FEDHET_TEST_THREADS replaces
pytestmark = pytest.mark.skipif(TEST_THREADS != 1, reason="FEDHET_TEST_THREADS replaces the runs' threads")

FEDAVG = Path(__file__).resolve().parents[2] / "configs" / "fedavg" / "digits.yaml"


@pytest.fixture(autouse=True)
def _restore_threads():
    """Each test starts on two threads (a machine's default, as on this 2-core one) and leaves one (conftest's)."""
    torch.set_num_threads(2)
    yield
    pin_threads(1)


def _blas_threads() -> set[int]:
    """The threads of every BLAS that can thread: a single-threaded build (threading layer ``disabled``, such as the
    OpenBLAS SCS ships, loaded once cvxpy is imported) computes on one thread whatever it is asked."""
    pools = threadpool_info()
    return {p["num_threads"] for p in pools if p["user_api"] == "blas" and p.get("threading_layer") != "disabled"}


def test_pin_threads_sets_torch_and_blas():
    pin_threads(3)
    assert torch.get_num_threads() == 3
    assert _blas_threads() in (set(), {3})  # NumPy's BLAS, where threadpoolctl finds one
    pin_threads(1)
    assert torch.get_num_threads() == 1
    assert _blas_threads() in (set(), {1})


class ThreadsSeen(FederatedCallback):
    def __init__(self):
        self.seen = []

    def on_round_end(self, round_idx):
        self.seen.append(torch.get_num_threads())


@pytest.mark.parametrize("threads", [1, 3])
def test_a_run_trains_on_its_configured_threads(tmp_path, tiny_federation, threads):
    seen = ThreadsSeen()
    options = trainer_options(
        rounds=2, accelerator="cpu", enable_progress_bar=False, default_root_dir=str(tmp_path), threads=threads
    )
    FederatedTrainer(**options, callbacks=[seen]).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert seen.seen == [threads, threads]


def test_the_cli_pins_threads_before_building_the_model_and_records_them(tmp_path):
    built = {}

    class Spy(FederatedCLI):
        def instantiate_trainer(self, **kwargs):
            built["threads when the model was built"] = torch.get_num_threads()
            return super().instantiate_trainer(**kwargs)

    cli = Spy(args=["-c", str(FEDAVG), f"--trainer.default_root_dir={tmp_path}"], run=False)
    assert built["threads when the model was built"] == 1  # the default, not the process's 2
    assert cli.config_dump["trainer"]["processes"]["threads"] == 1  # what config.yaml holds
    cli = Spy(args=["-c", str(FEDAVG), "--trainer.processes.threads=2"], run=False)
    assert built["threads when the model was built"] == 2
    assert cli.config_dump["trainer"]["processes"]["threads"] == 2


def test_zero_threads_are_refused_by_name():
    with pytest.raises(ValueError, match="processes: field 'threads' must be at least 1, got 0"):
        trainer_options(threads=0)
