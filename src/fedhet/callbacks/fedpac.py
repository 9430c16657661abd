r"""FedPAC's server step: its wire names, its upload declaration, centroid sync and head mixing.

J. Xu, X. Tong, S.-L. Huang, "Personalized Federated Learning with Feature Alignment and Classifier Collaboration",
ICLR 2023. The module (:class:`~fedhet.modules.FedPAC`) uploads, besides its shared body, the class centroids and
counts of its trained features (feature alignment) and its head statistics :math:`H, V/n` with its trained head
(classifier collaboration), as :func:`fedpac_upload` declares. Each round the server runs, in this order:

1. :class:`CentroidSync`: the count-weighted mean of the centroids, broadcast as ``fedpac/global_centroids`` and
   ``fedpac/global_counts`` (eq. 19);
2. :class:`HeadMixing`: one simplex QP per participant and its mixed head, sent to that client only (eqs. 4, 46).

Neither reads what the other writes; the maths is in :mod:`fedhet.functional.centroids` and
:mod:`fedhet.functional.head_mixing`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fedhet.callbacks.base import FederatedCallback
from fedhet.callbacks.figures import new_figure
from fedhet.core import ClientUpdate, Federation, ServerAccess, ServerState, TensorSpec, UploadDeclaration
from fedhet.functional.centroids import aggregate_centroids
from fedhet.functional.head_mixing import combination_weights, mix_heads

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CENTROIDS = "fedpac/centroids"
"""Uploaded: the client's class centroids of its trained features, ``(K, d)``."""
COUNTS = "fedpac/counts"
"""Uploaded: the client's class counts, ``(K,)``."""
HEAD_H = "fedpac/H"
""":math:`H` of the received body's features, ``(K, d)``."""
HEAD_V = "fedpac/v"
""":math:`V/n` of the received body's features, ``()``."""
HEAD_PREFIX = "fedpac/"
"""Prefix of the uploaded head's parameters: ``fedpac/head.weight``, ``fedpac/head.bias``."""
HEAD_NAMES = ("head.weight", "head.bias")
"""The personal head's parameters, which the server mixes per client (and sends back under these names)."""
GLOBAL_CENTROIDS = "fedpac/global_centroids"
"""Broadcast: the global class centroids, ``(K, d)``."""
GLOBAL_COUNTS = "fedpac/global_counts"
"""Broadcast: the round's class counts, ``(K,)`` (0: the class has no global centroid)."""


def fedpac_upload(
    num_classes: int,
    feature_dim: int,
    head: Mapping[str, TensorSpec],
    feature_alignment: bool = True,
    classifier_collaboration: bool = True,
    dtype: torch.dtype | None = None,
) -> UploadDeclaration:
    """What a FedPAC client uploads besides its shared body.

    Args:
        num_classes: :math:`K`, the head's outputs.
        feature_dim: :math:`d`, the body's output width.
        head: the head's parameters :data:`HEAD_NAMES` as the client's module has them.
        feature_alignment: upload centroids ``(K, d)`` and counts ``(K,)``.
        classifier_collaboration: upload :math:`H` ``(K, d)``, :math:`V/n` ``()`` and the trained head.
        dtype: of the statistics (the statistics passes accumulate in fresh tensors); the default dtype when ``None``.

    Example:
        >>> head = {"head.weight": TensorSpec((3, 4)), "head.bias": TensorSpec((3,))}
        >>> sorted(fedpac_upload(3, 4, head, classifier_collaboration=False).statistics)
        ['fedpac/centroids', 'fedpac/counts']

    """
    dtype = dtype or torch.get_default_dtype()
    statistics: dict[str, TensorSpec] = {}
    if feature_alignment:
        statistics[CENTROIDS] = TensorSpec((num_classes, feature_dim), dtype)
        statistics[COUNTS] = TensorSpec((num_classes,), dtype)
    if classifier_collaboration:
        statistics |= {HEAD_H: TensorSpec((num_classes, feature_dim), dtype), HEAD_V: TensorSpec((), dtype)}
        statistics |= {HEAD_PREFIX + name: head[name] for name in HEAD_NAMES}
    return UploadDeclaration(statistics, frozenset({"train/loss", "train/align"}))


class CentroidSync(FederatedCallback):
    r"""Averages the participants' local class centroids into global ones and broadcasts them (FedPAC eq. 19).

    .. math::
        c_k = \frac{\sum_{i \in S_t} n_{i,k} \hat c_{i,k}}{\sum_{i \in S_t} n_{i,k}}

    over the clients of the round that hold class :math:`k`; classes nobody held this round get no centroid (their
    count is 0 in the broadcast). Reads the uploads' :data:`CENTROIDS` and :data:`COUNTS`, writes
    :data:`GLOBAL_CENTROIDS` and :data:`GLOBAL_COUNTS` into the server's broadcast statistics.
    """

    server_access = ServerAccess(writes=(GLOBAL_CENTROIDS, GLOBAL_COUNTS))

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


class HeadMixing(FederatedCallback):
    r"""Solves FedPAC's QP for every participant and sends each its mixed head (eqs. 4 and 46).

    For participant :math:`i`, :math:`\alpha_i = \arg\min_{\alpha \in \Delta} \|H_i - \sum_j \alpha_j H_j\|_F^2 +
    \sum_j \alpha_j^2 V_j / n_j` over the round's participants; weights :math:`\le` ``threshold`` are dropped and the
    rest renormalised; the new head is :math:`\hat\phi_i = \sum_j \alpha_{ij} \phi_j` (weight and bias), delivered
    through ``server_state.per_client`` (loaded into the client after the shared body). A client whose QP fails keeps
    its own head.

    Args:
        threshold: weights at or below it are zeroed (the reference code's 1e-3).
        record_rounds: rounds whose weight matrices are kept in :attr:`recorded` (the latest is always in
            :attr:`weights`).

    """

    server_access = ServerAccess(per_client=HEAD_NAMES)

    def __init__(self, threshold: float = 1e-3, record_rounds: Sequence[int] = ()) -> None:
        self.threshold = threshold
        self.record_rounds = set(record_rounds)
        self.weights: Tensor | None = None
        self.client_ids: list[str] = []
        self.recorded: dict[int, Tensor] = {}
        self.solve_seconds = 0.0

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """One QP per participant; mixed heads into ``server_state.per_client``."""
        uploads = [u for u in updates if HEAD_H in u.statistics]
        if not uploads:
            return
        start = time.perf_counter()
        h = torch.stack([u.statistics[HEAD_H] for u in uploads])
        v = torch.stack([u.statistics[HEAD_V].reshape(()) for u in uploads])
        weights = combination_weights(h, v, threshold=self.threshold)
        heads = {name: torch.stack([u.statistics[HEAD_PREFIX + name] for u in uploads]) for name in HEAD_NAMES}
        mixed = mix_heads(weights, heads)
        for k, update in enumerate(uploads):
            server_state.per_client[update.client_id] = {name: mixed[name][k] for name in HEAD_NAMES}
        self.solve_seconds = time.perf_counter() - start
        self.weights = weights.float()
        self.client_ids = [u.client_id for u in uploads]
        if round_idx in self.record_rounds:
            self.recorded[round_idx] = self.weights
        trainer.log_dict(
            {
                "fedpac/self_weight": float(self.weights.diagonal().mean()),
                "fedpac/partners": float((self.weights > 0).sum(1).float().mean()),
                "fedpac/qp_seconds": self.solve_seconds,
            },
            step=round_idx,
        )

    def figures(self, trainer: Federation, round_idx: int) -> dict[str, Figure]:
        """The latest head-mixing weights as a heat map (``fedpac_head_mixing``), once a round has mixed heads."""
        if self.weights is None:
            return {}
        return {"fedpac_head_mixing": head_mixing_figure(self.weights, self.client_ids, round_idx)}

    def state_dict(self) -> dict[str, Any]:
        """The latest weights, their clients and the recorded rounds."""
        return {"weights": self.weights, "client_ids": list(self.client_ids), "recorded": dict(self.recorded)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.weights = state_dict.get("weights")
        self.client_ids = list(state_dict.get("client_ids", []))
        self.recorded = dict(state_dict.get("recorded", {}))


def head_mixing_figure(weights: Tensor, client_ids: Sequence[str], round_idx: int) -> Figure:
    """FedPAC's head-mixing weights as a heat map: row ``i`` is the simplex weights client ``i`` gives each client."""
    k = len(client_ids)
    figure = new_figure(3.0 + 0.35 * k, 2.4 + 0.35 * k)
    axes = figure.add_subplot()
    image = axes.imshow(weights.detach().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    axes.set_xticks(range(k), list(client_ids), rotation=90, fontsize=7)
    axes.set_yticks(range(k), list(client_ids), fontsize=7)
    axes.set(xlabel="head of client j", ylabel="client i", title=f"FedPAC head mixing, round {round_idx + 1}")
    figure.colorbar(image, ax=axes, label="weight")
    return figure
