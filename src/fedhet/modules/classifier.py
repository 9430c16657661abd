"""FederatedClassifier: a body + linear head classifier sized from the client's description."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from fedhet.datamodules.spec import ClientSpec
from fedhet.modules.base import FederatedModule
from fedhet.modules.blocks import mlp


class FederatedClassifier(FederatedModule):
    """``head(body(x))`` trained with cross-entropy; the base of the baselines (which parts are shared differs).

    ``body`` maps a sample to a feature vector and ``head`` is a linear layer to the federation's classes; override
    :meth:`build_body` for another feature extractor. Metrics: accuracy over all evaluated samples and mean loss.

    Args:
        hidden_dims: widths of the body's hidden layers (an MLP over the flattened input).
        dropout: dropout after each hidden layer.
        optimizer: ``"sgd"`` or ``"adam"``.
        lr: learning rate.
        momentum: SGD momentum.
        weight_decay: L2 penalty.

    """

    def __init__(
        self,
        hidden_dims: Sequence[int] = (64,),
        dropout: float = 0.0,
        optimizer: Literal["sgd", "adam"] = "sgd",
        lr: float = 0.05,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"{type(self).__name__}: field 'optimizer' must be 'sgd' or 'adam', got {optimizer!r}")
        if lr <= 0:
            raise ValueError(f"{type(self).__name__}: field 'lr' must be positive, got {lr}")
        self.save_hyperparameters()
        self.hidden_dims = tuple(hidden_dims)
        self.dropout = dropout
        self.optimizer_name = optimizer
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay

    def build_body(self, spec: ClientSpec) -> tuple[nn.Module, int]:
        """The feature extractor for this client and its output width."""
        return mlp(spec.input_dim, self.hidden_dims, self.dropout)

    def configure_model(self) -> None:
        """Create ``body`` and ``head`` for the client (once)."""
        if hasattr(self, "head"):
            return
        spec = self.spec
        self.body, width = self.build_body(spec)
        self.head = nn.Linear(width, spec.num_classes)

    def configure_metrics(self, stage: str) -> MetricCollection:
        """Accuracy over every evaluated sample and mean cross-entropy."""
        local = {"sync_on_compute": False}
        return MetricCollection(
            {"acc": MulticlassAccuracy(self.spec.num_classes, average="micro", **local), "loss": MeanMetric(**local)}
        )

    def forward(self, x: Tensor) -> Tensor:
        """Class logits, shape ``(B, num_classes)``, for inputs of shape ``(B, *input_shape)``."""
        return self.head(self.body(x))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """Cross-entropy on one batch."""
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def sample_losses(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Cross-entropy of each of the batch's ``B`` samples, shape ``(B,)``; ``training_step`` takes their mean.

        It lets ``FederatedTrainer(stack_clients=...)`` train many clients at once, with ``torch.func.vmap``.
        """
        x, y = batch
        return F.cross_entropy(self(x), y, reduction="none")

    def _evaluation_step(self, batch: tuple[Tensor, Tensor], stage: str) -> None:
        x, y = batch
        logits = self(x)
        metrics = self.evaluation_metrics(stage)
        metrics["acc"].update(logits, y)
        metrics["loss"].update(F.cross_entropy(logits, y, reduction="none"))

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """Update the validation metrics."""
        self._evaluation_step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        """Update the test metrics."""
        self._evaluation_step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD or Adam over every parameter (a local phase freezes what it does not train)."""
        if self.optimizer_name == "adam":
            return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
