"""Summaries of per-client metrics: mean, sample-weighted mean and worst client."""

from __future__ import annotations

from collections.abc import Mapping

from torchmetrics.aggregation import MaxMetric, MeanMetric, MinMetric


def summarize_clients(
    per_client: Mapping[str, Mapping[str, float]],
    num_samples: Mapping[str, int],
    higher_is_better: Mapping[str, bool],
    prefix: str,
    log_per_client: bool = True,
) -> dict[str, float]:
    """Fold per-client metrics into ``{prefix}/{metric}_mean``, ``_weighted`` and ``_worst`` (and per-client keys).

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
    for name in names:
        local = {"sync_on_compute": False}  # every process already holds every client's values
        mean, weighted = MeanMetric(**local), MeanMetric(**local)
        worst = (MinMetric if higher_is_better.get(name, False) else MaxMetric)(**local)
        for client_id in sorted(per_client):
            if name not in per_client[client_id]:
                continue
            value = per_client[client_id][name]
            mean.update(value)
            weighted.update(value, weight=num_samples[client_id])
            worst.update(value)
            if log_per_client:
                out[f"{prefix}/{name}/{client_id}"] = value
        out[f"{prefix}/{name}_mean"] = mean.compute().item()
        out[f"{prefix}/{name}_weighted"] = weighted.compute().item()
        out[f"{prefix}/{name}_worst"] = worst.compute().item()
    return out
