import math
import os
import sys
from pathlib import Path

import lightning
import pytest
import torch

from fedhet.datamodules import ClientDataModule, FederatedDataModule

#: The threads the tests compute on (``FEDHET_TEST_THREADS``, 1 by default: tiny models run many times faster on one
#: thread than on two busy cores). A run whose config leaves ``trainer.processes.threads`` at 1 runs on these too, so
#: ``FEDHET_TEST_THREADS=2 pytest -m kernels`` checks the equality tests on two threads.
TEST_THREADS = int(os.environ.get("FEDHET_TEST_THREADS", "1"))
torch.set_num_threads(TEST_THREADS)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

REPOSITORY = Path(__file__).resolve().parents[1]
BEFORE = pytest.StashKey[set]()
#: what running tools leave in a checkout by design (caches), never a test's output
CACHES = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis", ".import_linter_cache"}


def repository_files() -> set[str]:
    """Every file and folder in the checkout (ignored ones included), caches left out."""
    found = set()
    for folder, subfolders, files in os.walk(REPOSITORY):
        subfolders[:] = [name for name in subfolders if name not in CACHES and not name.endswith(".egg-info")]
        here = Path(folder).relative_to(REPOSITORY)
        found.update(str(here / name) for name in (*subfolders, *files))
    return found


def pytest_sessionstart(session):
    session.config.stash[BEFORE] = repository_files()


def pytest_sessionfinish(session, exitstatus):
    """Tests write only under their own temporary folders: the session fails when it leaves files in the checkout."""
    before = session.config.stash.get(BEFORE, None)
    if before is None:
        return
    left = sorted(repository_files() - before)
    if left:
        shown = "\n  ".join(left[:20]) + ("\n  ..." if len(left) > 20 else "")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        reporter.write("\n")
        reporter.write_line(f"tests left {len(left)} file(s) in the repository (write under tmp_path):\n  {shown}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def float64():
    """Data, modules and statistics built in float64 (the default dtype; put back after the test)."""
    torch.set_default_dtype(torch.float64)


@pytest.fixture(autouse=True)
def _test_threads(monkeypatch):
    """Runs of the default 1 thread compute on ``TEST_THREADS`` instead (nothing to do at 1)."""
    if TEST_THREADS == 1:
        return
    from fedhet.cli import _lightning
    from fedhet.plugins.processes.threads import pin_threads
    from fedhet.plugins.rounds import launch

    def pin(threads: int) -> None:
        pin_threads(TEST_THREADS if threads == 1 else threads)

    monkeypatch.setattr(launch, "pin_threads", pin)
    monkeypatch.setattr(_lightning, "pin_threads", pin)


@pytest.fixture(autouse=True)
def _leave_nothing_open():
    """Whatever a test leaves behind that the next would inherit is put back: an open W&B run (a ``WandbLogger`` built
    later would join it), torch's default dtype and its threads."""
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    yield
    wandb = sys.modules.get("wandb")  # imported by a test that used it (importing it here costs every test)
    if wandb is not None and wandb.run is not None:
        wandb.finish()
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)


def make_client(
    client_id: str, n: int, seed: int, classes=(0, 1, 2), dim: int = 6, nudge: bool = False, **kwargs
) -> ClientDataModule:
    """A seeded Gaussian-blob client: class c is centred at 2 * e_c.

    ``nudge`` moves every feature one unit in the last place up (``torch.nextafter``): data that differ from the
    client's by one rounding, whose run measures how far rounding alone moves a result (:mod:`tests.rounding`).
    """
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes)[torch.randint(len(classes), (n,), generator=g)]
    centres = 2.0 * torch.eye(max(3, dim))[:, :dim]
    x = centres[y] + torch.randn(n, dim, generator=g)
    if nudge:
        x = torch.nextafter(x, torch.full_like(x, math.inf))
    kwargs.setdefault("test_fraction", 0.25)
    kwargs.setdefault("val_fraction", 0.25)
    return ClientDataModule(client_id, x, y, num_classes=3, batch_size=8, seed=seed, **kwargs)


def plain_trainer(epochs=3, callbacks=()):
    """A quiet CPU ``lightning.Trainer`` for one client: no logger, checkpoints, progress or sanity steps."""
    return lightning.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
    )


@pytest.fixture
def tiny_federation() -> FederatedDataModule:
    """Four small clients with different class mixes and sizes."""
    return FederatedDataModule(
        [
            make_client("a", 40, 0, classes=(0, 1)),
            make_client("b", 32, 1, classes=(1, 2)),
            make_client("c", 48, 2, classes=(0, 1, 2)),
            make_client("d", 24, 3, classes=(2,)),
        ]
    )
