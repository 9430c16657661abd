"""A suite's figures (matplotlib, Agg): validation accuracy against round, and per-client test accuracy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _by(results: Sequence[Mapping[str, Any]], federation: str) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        if r["federation"] == federation:
            groups.setdefault(r["method"], []).append(r)
    return groups


def plot_suite(
    results: Sequence[Mapping[str, Any]], metric: str, folder: Path, provenance: Mapping[str, str]
) -> list[Path]:
    """Write ``val_<federation>.png`` and ``clients_<federation>.png`` per federation; return their paths.

    ``val_``: ``val/<metric>_mean`` against round, per method the mean over seeds with a band from the lowest to the
    highest seed. ``clients_``: per method, the distribution (box plot) of the per-client test ``<metric>`` over all
    clients and seeds. Each PNG names ``provenance`` (suite file, commit, environment, inputs' sha256) in its
    metadata.
    """
    description = "; ".join(f"{k}: {v}" for k, v in provenance.items())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    key = f"val/{metric}_mean"
    for federation in dict.fromkeys(r["federation"] for r in results):
        groups = _by(results, federation)
        fig, ax = plt.subplots(figsize=(6, 4))
        for method, runs in groups.items():
            curves = [{row["round"]: row[key] for row in r["val"] if key in row} for r in runs]
            rounds = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
            if not rounds:
                continue
            values = np.array([[c[x] for x in rounds] for c in curves])
            (line,) = ax.plot(rounds, values.mean(axis=0), label=method)
            ax.fill_between(rounds, values.min(axis=0), values.max(axis=0), color=line.get_color(), alpha=0.2)
        ax.set(xlabel="round", ylabel=key, title=f"{federation}: validation (band: range over seeds)")
        ax.legend()
        path = folder / f"val_{federation}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Description": description})
        plt.close(fig)
        written.append(path)

        fig, ax = plt.subplots(figsize=(6, 4))
        prefix = f"test/{metric}/"
        data = [[v for r in runs for k, v in r["test"].items() if k.startswith(prefix)] for runs in groups.values()]
        ax.boxplot(data)
        ax.set_xticks(range(1, len(groups) + 1), list(groups))
        ax.set(ylabel=f"test {metric} per client", title=f"{federation}: clients over all seeds")
        path = folder / f"clients_{federation}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Description": description})
        plt.close(fig)
        written.append(path)
    return written
