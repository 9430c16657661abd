"""HeadMixing: FedPAC's classifier collaboration — one simplex QP per client, a personalised mixed head back."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientUpdate, Federation, ServerState
from fedhet.core.statistics import HEAD_H, HEAD_NAMES, HEAD_PREFIX, HEAD_V
from fedhet.functional.head_mixing import combination_weights, mix_heads


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
        fabric = getattr(trainer, "fabric", None)
        if fabric is not None:
            fabric.log_dict(
                {
                    "fedpac/self_weight": float(self.weights.diagonal().mean()),
                    "fedpac/partners": float((self.weights > 0).sum(1).float().mean()),
                    "fedpac/qp_seconds": self.solve_seconds,
                },
                step=round_idx,
            )

    def state_dict(self) -> dict[str, Any]:
        """The latest weights, their clients and the recorded rounds."""
        return {"weights": self.weights, "client_ids": list(self.client_ids), "recorded": dict(self.recorded)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.weights = state_dict.get("weights")
        self.client_ids = list(state_dict.get("client_ids", []))
        self.recorded = dict(state_dict.get("recorded", {}))
