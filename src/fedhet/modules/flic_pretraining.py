r"""FLIC's preparation of the embedding: pre-training at a client's first participation, re-alignment at later ones.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024. The client's
embedding :math:`\phi_i` alone is trained on the alignment term towards the anchors, with its own Adam. Under the
federation engine this is a preparation phase (:meth:`~fedhet.modules.FLIC.preparation_phases`) whose losses
:class:`AlignmentRecord` keeps; without the engine the module runs :func:`pretrain_embedding` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor, nn

ALIGNMENT_PHASES = ("pretrain", "realign")
"""The preparation phases: pre-training of the embedding at the first participation, re-alignment at later ones."""


def pretrain_embedding(
    embedding: nn.Module,
    alignment: Callable[[Tensor, Tensor], Tensor],
    loader: Iterable[Any],
    epochs: int,
    lr: float,
    device: torch.device,
) -> list[float]:
    r"""Minimise ``alignment(embedding(x), y)`` over the embedding alone (Adam at ``lr``) for ``epochs`` epochs.

    Returns:
        the mean alignment loss of each epoch.

    """
    optimizer = torch.optim.Adam(list(embedding.parameters()), lr=lr)
    history = []
    with torch.enable_grad():
        for _ in range(epochs):
            total, count = 0.0, 0
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                loss = alignment(embedding(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total, count = total + float(loss.detach()), count + 1
            history.append(total / max(count, 1))
    optimizer.zero_grad(set_to_none=True)
    return history


class AlignmentRecord:
    """The step losses of the preparation phase being run, told apart by epoch when it ends."""

    def __init__(self) -> None:
        self.epochs = 0
        self.losses: list[Tensor] = []

    def start(self, epochs: int) -> None:
        """A preparation phase of ``epochs`` epochs begins."""
        self.epochs, self.losses = epochs, []

    def add(self, loss: Tensor) -> None:
        """One step's loss (detached)."""
        self.losses.append(loss.detach())

    def history(self) -> list[float]:
        """The mean loss of each epoch of the phase (its steps split evenly in order; 0.0 for an empty epoch)."""
        losses = torch.stack(self.losses).double() if self.losses else torch.zeros(0)
        return [float(epoch.mean()) if len(epoch) else 0.0 for epoch in losses.tensor_split(self.epochs)]
