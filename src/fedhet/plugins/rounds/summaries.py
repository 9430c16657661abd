"""Round metrics from per-client numbers: evaluation summaries (mean, sample-weighted mean, worst client), training."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedhet.core import ClientFailure, ClientUpdate, RoundUploads

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


def training_metrics(
    round_idx: int,
    updates: Sequence[ClientUpdate],
    failures: Sequence[ClientFailure],
    comm: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """A round's training metrics from its admitted uploads and its failed clients.

    The clients' mean training loss, plain and sample-weighted; participants, failures and stragglers; the ``comm``
    metrics (:class:`~fedhet.plugins.rounds.comm.CommTotals`); and the mean over the clients of each other value a
    module logged during local training (its ``self.log``), as ``<name>_mean``.

    Example:
        >>> from fedhet.core import ClientUpdate
        >>> ups = [ClientUpdate("a", 1, {}, metrics={"loss": 1.0}), ClientUpdate("b", 3, {}, metrics={"loss": 2.0})]
        >>> m = training_metrics(0, ups, [])
        >>> m["train/loss_mean"], m["train/loss_weighted"], m["clients/participants"]
        (1.5, 1.75, 2.0)

    """
    weights = [u.num_samples for u in updates]
    losses = [u.metrics["loss"] for u in updates]
    metrics: dict[str, float] = {
        "round": float(round_idx),
        "train/loss_mean": sum(losses) / len(losses),
        "train/loss_weighted": sum(w * x for w, x in zip(weights, losses, strict=True)) / max(sum(weights), 1),
        "clients/participants": float(len(updates)),
        "clients/failed": float(len(failures)),
        "clients/stragglers": float(sum(f.kind == "straggler" for f in failures)),
        **(comm or {}),
    }
    for name in sorted({name for u in updates for name in u.metrics} - {"loss", "steps"}):  # the modules' self.log
        values = [u.metrics[name] for u in updates if name in u.metrics]
        metrics.setdefault(f"{name}_mean", sum(values) / len(values))
    return metrics


def merge_uploads(
    parts: Sequence[RoundUploads], order: Mapping[str, int]
) -> tuple[list[ClientUpdate], list[ClientFailure], int]:
    """The uploads gathered from every process as one round: updates and failures in client ``order``, bytes down."""
    updates = sorted((u for part in parts for u in part.updates), key=lambda u: order[u.client_id])
    failures = sorted((f for part in parts for f in part.failures), key=lambda f: order[f.client_id])
    return updates, failures, sum(part.bytes_down for part in parts)


def evaluation_metrics(
    parts: Sequence[tuple[Mapping[str, Any], Sequence[str]]], stage: str, log_per_client: bool = True
) -> dict[str, float]:
    """Summaries of the evaluations gathered from every process (:func:`summarize_clients`), and the failed count.

    Args:
        parts: per process, ``(client_id -> ClientEvaluation, failed client ids)`` (a runner's ``evaluate``).
        stage: ``"val"`` or ``"test"``.
        log_per_client: also return each client's metrics.

    Returns:
        the summaries and ``clients/{stage}_failed``; empty when no client was evaluated.

    """
    evaluations = {cid: evaluation for part, _ in parts for cid, evaluation in part.items()}
    if not evaluations:
        return {}
    metrics = summarize_clients(
        {cid: e.metrics for cid, e in evaluations.items()},
        {cid: e.num_samples for cid, e in evaluations.items()},
        {name: d for e in evaluations.values() for name, d in e.higher_is_better.items()},
        prefix=stage,
        log_per_client=log_per_client,
    )
    metrics[f"clients/{stage}_failed"] = float(sum(len(failed) for _, failed in parts))
    return metrics
