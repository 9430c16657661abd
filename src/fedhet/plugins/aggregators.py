"""Server-side aggregation of the clients' shared parameters, by parameter name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal

import torch
from torch import Tensor

from fedhet.core import ClientUpdate
from fedhet.functional import weighted_mean_compute, weighted_mean_update


class Aggregator(ABC):
    """Folds client uploads into a new server state: ``update`` per client, ``compute`` once, ``reset`` per round.

    The engine feeds uploads in client-id order on every process, so aggregation is bit-identical whatever the
    number of processes.
    """

    @abstractmethod
    def update(self, upload: ClientUpdate) -> None:
        """Fold in one client's upload."""

    @abstractmethod
    def compute(self) -> dict[str, Tensor]:
        """The aggregated shared parameters, keyed by name (only names that some client uploaded)."""

    @abstractmethod
    def reset(self) -> None:
        """Forget the uploads folded in so far."""


class WeightedMean(Aggregator):
    """Mean of each shared parameter over the clients that hold it (FedAvg; McMahan et al., AISTATS 2017).

    Args:
        weighting: ``"samples"`` weighs each client by its number of training samples (FedAvg), ``"uniform"`` gives
            every client the same weight (e.g. Global Layers' BatchAlignedFedAvg).

    """

    def __init__(self, weighting: Literal["samples", "uniform"] = "samples") -> None:
        if weighting not in ("samples", "uniform"):
            raise ValueError(f"WeightedMean: field 'weighting' must be 'samples' or 'uniform', got {weighting!r}")
        self.weighting = weighting
        self.reset()

    def update(self, upload: ClientUpdate) -> None:
        """Add ``weight * theta`` for each shared parameter of the client."""
        weight = float(upload.num_samples) if self.weighting == "samples" else 1.0
        weighted_mean_update(self._sums, self._totals, upload.shared, weight)
        self._dtypes.update({name: value.dtype for name, value in upload.shared.items()})

    def compute(self) -> dict[str, Tensor]:
        """Divide each running sum by the total weight of its holders."""
        return weighted_mean_compute(self._sums, self._totals, self._dtypes)

    def reset(self) -> None:
        """Clear the running sums."""
        self._sums: dict[str, Tensor] = {}
        self._totals: dict[str, float] = {}
        self._dtypes: dict[str, torch.dtype] = {}
