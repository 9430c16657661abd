"""BatchAlignedFedAvg's batch sizes: every client takes the same number of optimizer steps per round (Global Layers).

"Global Layers: Non-IID Tabular Federated Learning" (§3.4): with ``B`` steps per round, client ``k`` trains on batches
of ``floor(n_k / B)`` rows, so clients of very different sizes still average after equally many steps.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import LightningModule
from lightning.pytorch import Trainer as LightningTrainer
from torch import nn

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientSpec


def aligned_batch_size(client_id: str, num_train: int, batches_per_epoch: int) -> int:
    """BatchAlignedFedAvg's batch size ``floor(n_k / B)``; raises when the client has fewer than ``B`` rows."""
    if num_train < batches_per_epoch:
        raise ValueError(
            f"client '{client_id}' has {num_train} training rows, fewer than batches_per_epoch={batches_per_epoch}"
        )
    return num_train // batches_per_epoch


class BatchAlignment(FederatedCallback):
    """Set every client's training batch size to ``floor(n_k / B)`` before the first round (BatchAlignedFedAvg).

    With the module's local phase of ``B`` optimizer steps, every client then takes exactly ``B`` steps per round and
    sees ``B * floor(n_k / B)`` distinct rows of a shuffled pass (the ``n_k mod B`` rows left over are skipped, as
    ``drop_last`` does). Under a plain ``lightning.Trainer`` it sets the client datamodule's batch size at ``setup``;
    cap the steps there with ``limit_train_batches=B``. This changes the ``batch_size`` of the client datamodules.

    Args:
        batches_per_epoch: ``B``, the optimizer steps per client per round.

    """

    def __init__(self, batches_per_epoch: int) -> None:
        if batches_per_epoch < 1:
            raise ValueError(f"BatchAlignment: field 'batches_per_epoch' must be >= 1, got {batches_per_epoch}")
        self.batches_per_epoch = batches_per_epoch

    def on_federation_start(self, trainer: Any, module: nn.Module) -> None:
        """Align the batch size of every client of the federation the trainer runs."""
        federation = trainer.datamodule
        for client_id in trainer.client_ids:
            client = federation.client(client_id)
            client.batch_size = aligned_batch_size(client_id, client.spec.num_train, self.batches_per_epoch)

    def setup(self, trainer: LightningTrainer, pl_module: LightningModule, stage: str) -> None:
        """Under a plain Trainer: align the client datamodule's batch size."""
        client: Any = getattr(trainer, "datamodule", None)  # a ClientDataModule (its spec and batch size) or else
        spec = getattr(client, "spec", None)
        if isinstance(spec, ClientSpec) and hasattr(client, "batch_size"):
            client.batch_size = aligned_batch_size(spec.client_id, spec.num_train, self.batches_per_epoch)
