"""CentroidSync: FedPAC's class-centroid upload, count-weighted aggregation and broadcast."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientUpdate, Federation, ServerState
from fedhet.core.statistics import CENTROIDS, COUNTS, GLOBAL_CENTROIDS, GLOBAL_COUNTS
from fedhet.functional.centroids import aggregate_centroids


class CentroidSync(FederatedCallback):
    r"""Averages the participants' local class centroids into global ones and broadcasts them (FedPAC eq. 19).

    .. math::
        c_k = \frac{\sum_{i \in S_t} n_{i,k} \hat c_{i,k}}{\sum_{i \in S_t} n_{i,k}}

    over the clients of the round that hold class :math:`k`; classes nobody held this round get no centroid (their
    count is 0 in the broadcast). Reads the uploads' ``fedpac/centroids`` and ``fedpac/counts``, writes
    ``fedpac/global_centroids`` and ``fedpac/global_counts`` into the server's broadcast statistics.
    """

    def __init__(self) -> None:
        self.centroids: Tensor | None = None
        self.counts: Tensor | None = None

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Aggregate the round's centroids and put them in the broadcast statistics."""
        uploads = [u for u in updates if CENTROIDS in u.statistics]
        if not uploads:
            return
        centroids = torch.stack([u.statistics[CENTROIDS] for u in uploads])
        counts = torch.stack([u.statistics[COUNTS] for u in uploads])
        self.centroids, self.counts = aggregate_centroids(centroids, counts)
        server_state.statistics[GLOBAL_CENTROIDS] = self.centroids
        server_state.statistics[GLOBAL_COUNTS] = self.counts

    def state_dict(self) -> dict[str, Any]:
        """The latest global centroids and counts."""
        return {"centroids": self.centroids, "counts": self.counts}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.centroids = state_dict.get("centroids")
        self.counts = state_dict.get("counts")
