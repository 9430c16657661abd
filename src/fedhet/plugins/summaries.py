"""Summaries of per-client metrics: mean, sample-weighted mean and worst client."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

log = logging.getLogger(__name__)


def summarize_clients(
    per_client: Mapping[str, Mapping[str, float]],
    num_samples: Mapping[str, int],
    higher_is_better: Mapping[str, bool],
    prefix: str,
    log_per_client: bool = True,
) -> dict[str, float]:
    """Fold per-client metrics into ``{prefix}/{metric}_mean``, ``_weighted`` and ``_worst`` (and per-client keys).

    The summaries are accumulated in float32 over the clients in sorted order, with NaN values left out (and a
    warning), the same arithmetic as torchmetrics' ``MeanMetric`` / ``MinMetric`` / ``MaxMetric`` updated one client at
    a time, without their per-update overhead. A metric with no finite-or-infinite value has a NaN mean and a worst
    value of ``-inf`` (higher is better) or ``inf``.

    Args:
        per_client: ``client_id -> metric -> value``.
        num_samples: ``client_id -> number of evaluated samples`` (weights of ``_weighted``).
        higher_is_better: ``metric -> bool``; the worst client has the lowest value when ``True``, the highest when
            ``False`` (losses).
        prefix: the stage, e.g. ``"val"``.
        log_per_client: also return ``{prefix}/{metric}/{client_id}``.

    Example:
        >>> out = summarize_clients({"a": {"acc": 1.0}, "b": {"acc": 0.5}}, {"a": 1, "b": 3}, {"acc": True}, "val")
        >>> out["val/acc_mean"], out["val/acc_weighted"], out["val/acc_worst"]
        (0.75, 0.625, 0.5)

    """
    out: dict[str, float] = {}
    names = sorted({name for metrics in per_client.values() for name in metrics})
    zero = np.float32(0.0)
    for name in names:
        higher = higher_is_better.get(name, False)
        total, count, weighted, weights = zero, zero, zero, zero
        worst = np.float32(np.inf if higher else -np.inf)
        skipped = []
        for client_id in sorted(per_client):
            if name not in per_client[client_id]:
                continue
            value = per_client[client_id][name]
            if log_per_client:
                out[f"{prefix}/{name}/{client_id}"] = value
            value32 = np.float32(value)
            if np.isnan(value32):
                skipped.append(client_id)
                continue
            weight = np.float32(num_samples[client_id])
            total, count = total + value32, count + np.float32(1.0)
            weighted, weights = weighted + value32 * weight, weights + weight
            worst = np.minimum(worst, value32) if higher else np.maximum(worst, value32)
        if skipped:
            log.warning("%s/%s: NaN values of clients %s left out of the summaries", prefix, name, skipped)
        with np.errstate(invalid="ignore", divide="ignore"):  # no value: a NaN mean, as 0 / 0
            out[f"{prefix}/{name}_mean"] = float(total / count)
            out[f"{prefix}/{name}_weighted"] = float(weighted / weights)
        out[f"{prefix}/{name}_worst"] = float(worst)
    return out
