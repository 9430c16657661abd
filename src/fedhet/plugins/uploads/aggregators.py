"""Server-side aggregation of the clients' shared parameters, by parameter name."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Literal

import torch
from torch import Tensor

from fedhet.core import ClientUpdate
from fedhet.functional import coordinate_median, trim_count, trimmed_mean, weighted_mean_compute, weighted_mean_update

log = logging.getLogger(__name__)


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


class _HeldUploads(Aggregator):
    """Keeps each upload's shared tensors until ``compute``: an order statistic needs every value at once."""

    def __init__(self) -> None:
        self.reset()

    def update(self, upload: ClientUpdate) -> None:
        """Keep the client's shared parameters."""
        self._states.append(upload.shared)

    def reset(self) -> None:
        """Drop the kept uploads."""
        self._states: list[dict[str, Tensor]] = []


class CoordinateMedian(_HeldUploads):
    """Coordinate-wise median of each shared parameter over the clients that hold it (Flower's ``FedMedian``).

    For an even number of holders, the mean of the two middle values (as ``numpy.median``). Any values sent by fewer
    than half of a parameter's holders cannot move it outside the range of the honest clients' values (Yin et al.,
    2018, "Byzantine-Robust Distributed Learning: Towards Optimal Statistical Rates", ICML). Clients are not weighted
    by their number of samples; see :func:`fedhet.functional.coordinate_median`.
    """

    def compute(self) -> dict[str, Tensor]:
        """The coordinate-wise medians of the kept uploads."""
        return coordinate_median(self._states)


class TrimmedMean(_HeldUploads):
    """Coordinate-wise trimmed mean of each shared parameter over the clients that hold it (Flower's ``FedTrimmedAvg``).

    For each coordinate the ``floor(beta * n)`` largest and smallest of the ``n`` holders' values are dropped and the
    rest averaged, so up to that many arbitrary values at each end are tolerated (Yin et al., 2018, "Byzantine-Robust
    Distributed Learning: Towards Optimal Statistical Rates", ICML). Clients are not weighted by their number of
    samples; see :func:`fedhet.functional.trimmed_mean`.

    Args:
        beta: the fraction trimmed at each end, in ``[0, 0.5)``; rounded down per parameter (``beta=0.2`` trims
            nothing from 4 holders and one from 5 to 9). ``0`` is the uniform mean.

    """

    def __init__(self, beta: float = 0.2) -> None:
        try:
            trim_count(beta, 1)
        except (ValueError, TypeError) as err:
            raise ValueError(f"TrimmedMean: field 'beta' must be a fraction in [0, 0.5), got {beta!r}") from err
        self.beta = float(beta)
        self._warned = False
        super().__init__()

    def compute(self) -> dict[str, Tensor]:
        """The coordinate-wise trimmed means of the kept uploads (warns once if ``beta`` trims none of them)."""
        if self.beta > 0 and self._states and trim_count(self.beta, len(self._states)) == 0 and not self._warned:
            log.warning(
                "TrimmedMean(beta=%s) trims nothing from %d uploads (floor(beta * n) = 0): the aggregate is their"
                " plain mean; raise beta to at least 1/n to drop the extreme values",
                self.beta,
                len(self._states),
            )
            self._warned = True
        return trimmed_mean(self._states, self.beta)
