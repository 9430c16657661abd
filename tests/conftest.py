import os
from pathlib import Path

import lightning
import pytest
import torch

from fedhet.datamodules import ClientDataModule, FederatedDataModule

# tiny models run many times faster on one thread than on two busy cores; results are compared within one process
torch.set_num_threads(1)
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
        reporter.ensure_newline()
        reporter.write_line(f"tests left {len(left)} file(s) in the repository (write under tmp_path):\n  {shown}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def make_client(client_id: str, n: int, seed: int, classes=(0, 1, 2), dim: int = 6, **kwargs) -> ClientDataModule:
    """A seeded Gaussian-blob client: class c is centred at 2 * e_c."""
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes)[torch.randint(len(classes), (n,), generator=g)]
    centres = 2.0 * torch.eye(max(3, dim))[:, :dim]
    x = centres[y] + torch.randn(n, dim, generator=g)
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
