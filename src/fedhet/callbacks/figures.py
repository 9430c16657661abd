"""Figures as pure functions of tensors and lists, each returning a ``matplotlib`` ``Figure``: the dashboard's own.

The run-wide pictures (clients' histogram, communication, a per-round objective) and the helpers a method's own
pictures are drawn with (:func:`new_figure`, :func:`to_2d`); each method draws its pictures in its callbacks file
(:meth:`~fedhet.callbacks.base.FederatedCallback.figures`). Built on ``matplotlib.figure.Figure`` (no ``pyplot`` state,
no display needed); ``pip install "fedhet[plot]"``. 2-D views of high-dimensional points use scikit-learn's PCA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def integer_ticks(axis: object) -> None:
    """Whole-number ticks on a matplotlib axis (rounds, clients)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))  # type: ignore[attr-defined]


def new_figure(width: float = 6.0, height: float = 4.0) -> Figure:
    """An empty figure of ``width`` by ``height`` inches, laid out to fit its labels."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # an optional dependency
        raise ImportError('the dashboard\'s figures need matplotlib: pip install "fedhet[plot]"') from err
    return Figure(figsize=(width, height), layout="constrained")


def to_2d(points: Tensor) -> Tensor:
    """``(N, d)`` points projected on their first two principal components (padded with zeros below 2-D)."""
    from sklearn.decomposition import PCA

    points = points.detach().double().cpu()
    if points.shape[1] <= 2:
        return torch.nn.functional.pad(points, (0, 2 - points.shape[1]))
    return torch.as_tensor(PCA(n_components=2, random_state=0).fit_transform(points.numpy()))


def client_histogram(values: Sequence[float], metric: str, title: str) -> Figure:
    """Histogram of one metric over the clients (e.g. every client's validation accuracy after a round)."""
    figure = new_figure()
    axes = figure.add_subplot()
    axes.hist(list(values), bins=min(20, max(5, len(values))), color="tab:blue", edgecolor="white")
    axes.set(xlabel=metric, ylabel="clients", title=title)
    integer_ticks(axes.yaxis)
    return figure


def communication(history: Sequence[Mapping[str, float]]) -> Figure:
    """Participants and bytes sent up and down per round (from the trainer's history)."""
    rounds = [int(row["round"]) + 1 for row in history]
    figure = new_figure(8.0, 3.5)
    left, right = figure.subplots(1, 2)
    left.bar(rounds, [row.get("clients/participants", 0.0) for row in history], color="tab:blue", label="trained")
    failed = [row.get("clients/failed", 0.0) for row in history]
    left.bar(rounds, failed, bottom=[row.get("clients/participants", 0.0) for row in history], color="tab:red",
             label="failed")  # fmt: skip
    left.set(xlabel="round", ylabel="clients", title="participation")
    for axes in (left, right):
        integer_ticks(axes.xaxis)
    left.legend()
    for key, label in (("comm/bytes_up", "up"), ("comm/bytes_down", "down")):
        right.plot(rounds, [row.get(key, 0.0) / 2**20 for row in history], marker="o", label=label)
    right.set(xlabel="round", ylabel="MiB", title="bytes per round")
    right.legend()
    return figure


def objective(rounds: Sequence[int], values: Sequence[float], name: str, title: str) -> Figure:
    """A per-round server objective (e.g. HyFEM's matching objective) against the round."""
    figure = new_figure()
    axes = figure.add_subplot()
    axes.plot([r + 1 for r in rounds], list(values), marker="o")
    integer_ticks(axes.xaxis)
    axes.set(xlabel="round", ylabel=name, title=title)
    return figure
