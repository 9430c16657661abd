import os

import lightning
import pytest
import torch

from fedhet.datamodules import ClientDataModule, FederatedDataModule

# tiny models run many times faster on one thread than on two busy cores; results are compared within one process
torch.set_num_threads(1)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


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
