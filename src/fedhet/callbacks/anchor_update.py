"""AnchorUpdate: FLIC's server step, the barycenter of the participants' Gaussian anchors, broadcast to every client."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientUpdate, Federation, RoundAware, ServerState
from fedhet.core.statistics import ANCHOR_COUNTS, ANCHOR_FACTORS, ANCHOR_MEANS, GLOBAL_FACTORS, GLOBAL_MEANS
from fedhet.functional.gaussian import gaussian_barycenter


class AnchorUpdate(FederatedCallback):
    r"""Averages the anchors uploaded by a round's participants into the global anchors (FLIC, Alg. 1 / S2).

    For each class :math:`c`, the new anchor is the 2-Wasserstein barycenter of the participants' anchors
    :math:`\mathcal{N}(v_{i,c}, L_{i,c} L_{i,c}^\top)` with weights :math:`\omega_i` normalised over the participants
    (the paper's :math:`\frac{b}{|A|} \sum_{i \in A} \omega_i v_{i,c}` with :math:`\omega_i = 1/b`): the weighted mean
    of the means; with learned covariances, the Bures barycenter of the covariances (``"bures"``, re-factored by
    Cholesky) or the paper's weighted mean of the Cholesky factors (``"cholesky_mean"``). With ``holders_only`` a class
    is averaged over the participants that hold it only (a class nobody holds keeps the equal-weight mean, i.e. its
    unchanged value). Reads the uploads' ``flic/anchor_means`` (and ``flic/anchor_factors``, ``flic/anchor_counts``),
    writes ``flic/global_anchor_means`` (and ``flic/global_anchor_factors``) into the broadcast statistics, and logs
    the anchor drift (mean move of the anchor means since the previous aggregation) and the seconds of the step.
    Before each client's local training it tells the module the round (FLIC's round-dependent schedule switches).

    Args:
        weighting: :math:`\omega_i`: ``"uniform"`` (the paper) or ``"samples"`` (proportional to training samples).
        holders_only: average each class over the participants holding it.
        covariance_aggregation: ``"bures"`` or ``"cholesky_mean"`` (see above).

    """

    def __init__(
        self,
        weighting: Literal["uniform", "samples"] = "uniform",
        holders_only: bool = False,
        covariance_aggregation: Literal["bures", "cholesky_mean"] = "bures",
    ) -> None:
        if weighting not in ("uniform", "samples"):
            raise ValueError(f"AnchorUpdate: field 'weighting' must be 'uniform' or 'samples', got {weighting!r}")
        if covariance_aggregation not in ("bures", "cholesky_mean"):
            raise ValueError(
                "AnchorUpdate: field 'covariance_aggregation' must be 'bures' or 'cholesky_mean',"
                f" got {covariance_aggregation!r}"
            )
        self.weighting = weighting
        self.holders_only = holders_only
        self.covariance_aggregation = covariance_aggregation
        self.means: Tensor | None = None
        self.factors: Tensor | None = None
        self.drift = 0.0
        self.seconds = 0.0

    def on_client_fit_start(self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module) -> None:
        """Tell a FLIC module (a :class:`~fedhet.core.RoundAware` one) which round it trains."""
        if isinstance(module, RoundAware):
            module.set_round(round_idx, trainer.rounds)

    def aggregate(self, updates: list[Any]) -> tuple[Tensor, Tensor | None]:
        """The barycenter of the uploads' anchors: means ``(C, k)`` and factors ``(C, k, k)`` (or ``None``)."""
        means = torch.stack([u.statistics[ANCHOR_MEANS] for u in updates])  # (N, C, k)
        weights = torch.tensor(
            [float(u.num_samples) if self.weighting == "samples" else 1.0 for u in updates], dtype=torch.float64
        )
        weights = weights[:, None].expand(means.shape[:2])
        if self.holders_only:
            weights = weights * (torch.stack([u.statistics[ANCHOR_COUNTS] for u in updates]) > 0)
        if ANCHOR_FACTORS not in updates[0].statistics:
            return gaussian_barycenter(means, weights)[0], None
        factors = torch.stack([u.statistics[ANCHOR_FACTORS] for u in updates])  # (N, C, k, k)
        if self.covariance_aggregation == "cholesky_mean":
            mean, _ = gaussian_barycenter(means, weights)
            averaged, _ = gaussian_barycenter(factors.flatten(-2), weights)  # the weighted mean of the factors
            return mean, averaged.unflatten(-1, factors.shape[-2:])
        mean, covariance = gaussian_barycenter(means, weights, factors @ factors.mT)
        assert covariance is not None
        return mean, torch.linalg.cholesky(covariance.double()).to(factors.dtype)

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Average the round's anchors and put them in the broadcast statistics."""
        uploads = [u for u in updates if ANCHOR_MEANS in u.statistics]
        if not uploads:
            return
        start = time.perf_counter()
        means, factors = self.aggregate(uploads)
        self.seconds = time.perf_counter() - start
        self.drift = float((means - self.means).norm(dim=-1).mean()) if self.means is not None else 0.0
        self.means, self.factors = means, factors
        server_state.statistics[GLOBAL_MEANS] = means
        if factors is not None:
            server_state.statistics[GLOBAL_FACTORS] = factors
        fabric = getattr(trainer, "fabric", None)
        if fabric is not None:
            fabric.log_dict({"flic/anchor_drift": self.drift, "flic/server_seconds": self.seconds}, step=round_idx)

    def state_dict(self) -> dict[str, Any]:
        """The latest global anchors."""
        return {"means": self.means, "factors": self.factors, "drift": self.drift}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.means = state_dict.get("means")
        self.factors = state_dict.get("factors")
        self.drift = float(state_dict.get("drift", 0.0))
