"""FederatedClassifier: a body + linear head classifier sized from the client's description."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from fedhet.core import ClientSpec, Stacking
from fedhet.modules.base import FederatedModule
from fedhet.modules.blocks import mlp
from fedhet.modules.image_cnns import FEATURE_DIM, paper_body


class FederatedClassifier(FederatedModule):
    """``head(body(x))`` trained with cross-entropy; the base of the baselines (which parts are shared differs).

    ``body`` maps a sample to a feature vector and ``head`` is a linear layer to the federation's classes; ``network``
    picks an MLP or the CNN of FedPAC's experiments (Xu et al., ICLR 2023, appendix B.1; every method of that paper's
    table uses it), and :meth:`build_body` can be overridden for another feature extractor. Metrics: accuracy over all
    evaluated samples and mean loss.

    Args:
        hidden_dims: widths of the body's hidden layers (an MLP over the flattened input).
        network: ``"mlp"`` (an MLP of ``hidden_dims``), ``"cnn"`` (the paper's CNN, required: ``(C, 28, 28)`` or
            ``(C, 32, 32)`` inputs) or ``"auto"`` (the CNN for such images, else the MLP).
        dropout: dropout after each hidden layer.
        optimizer: ``"sgd"`` or ``"adam"``.
        lr: learning rate.
        momentum: SGD momentum.
        weight_decay: L2 penalty.

    """

    reuse_optimizers = True  # configure_optimizers reads only hyperparameters and parameters (subclasses' too)

    def __init__(
        self,
        hidden_dims: Sequence[int] = (64,),
        network: Literal["auto", "cnn", "mlp"] = "mlp",
        dropout: float = 0.0,
        optimizer: Literal["sgd", "adam"] = "sgd",
        lr: float = 0.05,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"{type(self).__name__}: field 'optimizer' must be 'sgd' or 'adam', got {optimizer!r}")
        if network not in ("auto", "cnn", "mlp"):
            raise ValueError(f"{type(self).__name__}: field 'network' must be 'auto', 'cnn' or 'mlp', got {network!r}")
        if lr <= 0:
            raise ValueError(f"{type(self).__name__}: field 'lr' must be positive, got {lr}")
        self.save_hyperparameters()
        self.hidden_dims = tuple(hidden_dims)
        self.network = network
        self.dropout = dropout
        self.optimizer_name = optimizer
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay
        self._received: dict[str, Tensor] | None = None  # the anchor of local_penalty, set by on_train_start

    def build_body(self, spec: ClientSpec) -> tuple[nn.Module, int]:
        """The feature extractor for this client and its output width: the paper's CNN or an MLP, per ``network``."""
        if self.network != "mlp":
            body = paper_body(tuple(spec.input_shape))
            if body is not None:
                return body, FEATURE_DIM
            if self.network == "cnn":
                raise ValueError(
                    f"{type(self).__name__}: client '{spec.client_id}' has input shape {tuple(spec.input_shape)};"
                    " network='cnn' needs (C, 28, 28) or (C, 32, 32) images"
                )
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
        return MetricCollection(
            {
                "acc": MulticlassAccuracy(self.spec.num_classes, average="micro", sync_on_compute=False),
                "loss": MeanMetric(sync_on_compute=False),
            }
        )

    def forward(self, x: Tensor) -> Tensor:
        """Class logits, shape ``(B, num_classes)``, for inputs of shape ``(B, *input_shape)``."""
        return cast(Tensor, self.head(self.body(x)))

    def step_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """The mean of :meth:`sample_losses` (the batch's cross-entropy), plus :meth:`local_penalty` if defined."""
        loss = super().step_loss(batch)
        if self._received is not None:
            loss = loss + self.local_penalty(dict(self.named_parameters()), self._received).to(loss.device)
        return loss

    def local_penalty(self, params: Mapping[str, Tensor], received: Mapping[str, Tensor]) -> Tensor:
        """A term added to every local step's mean loss (e.g. FedProx's proximal term); none by default.

        A pure function of the client's parameters and of those it received at the start of the round (both
        ``name -> tensor`` over ``named_parameters()``), so that the stacked path (``StackedRunner``) can compute it
        for each client of a stack under ``torch.func.vmap`` as :meth:`step_loss` does for one client.

        Returns:
            a scalar tensor.

        """
        raise NotImplementedError(f"{type(self).__name__} defines no local_penalty")

    @property
    def has_local_penalty(self) -> bool:
        """Whether the method overrides :meth:`local_penalty`."""
        return type(self).local_penalty is not FederatedClassifier.local_penalty

    def on_train_start(self) -> None:
        """Remember the parameters received for the round, the anchor of :meth:`local_penalty` (if defined)."""
        received = self.has_local_penalty
        self._set_plain("_received", {n: p.detach().clone() for n, p in self.named_parameters()} if received else None)

    def stacking(self) -> Stacking | None:
        """Its clients train in stacks with the masked mean of :meth:`sample_losses` (plus :meth:`local_penalty`)."""
        return Stacking()

    def sample_losses(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """Cross-entropy of each of the batch's ``B`` samples, shape ``(B,)``; ``training_step`` takes their mean.

        It lets ``FederatedTrainer(runner=StackedRunner(N))`` train many clients at once, with ``torch.func.vmap``.
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
