"""The dashboard's figures as pure functions of tensors and lists: each returns a ``matplotlib`` ``Figure``.

Built on ``matplotlib.figure.Figure`` (no ``pyplot`` state, no display needed); ``pip install "fedhet[plot]"``. 2-D
views of high-dimensional points use scikit-learn's PCA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _integer_ticks(axis: object) -> None:
    """Whole-number ticks on a matplotlib axis (rounds, clients)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))  # type: ignore[attr-defined]


def _figure(width: float = 6.0, height: float = 4.0) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # an optional dependency
        raise ImportError('the dashboard\'s figures need matplotlib: pip install "fedhet[plot]"') from err
    return Figure(figsize=(width, height), layout="constrained")


def _to_2d(points: Tensor) -> Tensor:
    """``(N, d)`` points projected on their first two principal components (padded with zeros below 2-D)."""
    from sklearn.decomposition import PCA

    points = points.detach().double().cpu()
    if points.shape[1] <= 2:
        return torch.nn.functional.pad(points, (0, 2 - points.shape[1]))
    return torch.as_tensor(PCA(n_components=2, random_state=0).fit_transform(points.numpy()))


def client_histogram(values: Sequence[float], metric: str, title: str) -> Figure:
    """Histogram of one metric over the clients (e.g. every client's validation accuracy after a round)."""
    figure = _figure()
    axes = figure.add_subplot()
    axes.hist(list(values), bins=min(20, max(5, len(values))), color="tab:blue", edgecolor="white")
    axes.set(xlabel=metric, ylabel="clients", title=title)
    _integer_ticks(axes.yaxis)
    return figure


def communication(history: Sequence[Mapping[str, float]]) -> Figure:
    """Participants and bytes sent up and down per round (from the trainer's history)."""
    rounds = [int(row["round"]) + 1 for row in history]
    figure = _figure(8.0, 3.5)
    left, right = figure.subplots(1, 2)
    left.bar(rounds, [row.get("clients/participants", 0.0) for row in history], color="tab:blue", label="trained")
    failed = [row.get("clients/failed", 0.0) for row in history]
    left.bar(rounds, failed, bottom=[row.get("clients/participants", 0.0) for row in history], color="tab:red",
             label="failed")  # fmt: skip
    left.set(xlabel="round", ylabel="clients", title="participation")
    for axes in (left, right):
        _integer_ticks(axes.xaxis)
    left.legend()
    for key, label in (("comm/bytes_up", "up"), ("comm/bytes_down", "down")):
        right.plot(rounds, [row.get(key, 0.0) / 2**20 for row in history], marker="o", label=label)
    right.set(xlabel="round", ylabel="MiB", title="bytes per round")
    right.legend()
    return figure


def head_mixing(weights: Tensor, client_ids: Sequence[str], round_idx: int) -> Figure:
    """FedPAC's head-mixing weights as a heat map: row ``i`` is the simplex weights client ``i`` gives each client."""
    k = len(client_ids)
    figure = _figure(3.0 + 0.35 * k, 2.4 + 0.35 * k)
    axes = figure.add_subplot()
    image = axes.imshow(weights.detach().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
    axes.set_xticks(range(k), list(client_ids), rotation=90, fontsize=7)
    axes.set_yticks(range(k), list(client_ids), fontsize=7)
    axes.set(xlabel="head of client j", ylabel="client i", title=f"FedPAC head mixing, round {round_idx + 1}")
    figure.colorbar(image, ax=axes, label="weight")
    return figure


def anchors(global_means: Tensor, points: Tensor, labels: Tensor, round_idx: int) -> Figure:
    """FLIC's global class anchors (stars) and clients' embedded training samples (dots) in 2-D, coloured by class.

    Args:
        global_means: ``(C, d)`` anchor means in the shared space.
        points: ``(N, d)`` clients' samples embedded in the shared space by their own embedding.
        labels: ``(N,)`` the samples' classes.
        round_idx: the round shown.

    """
    num_classes = global_means.shape[0]
    flat = _to_2d(torch.cat([global_means.detach().double().cpu(), points.detach().double().cpu()]))
    figure = _figure()
    axes = figure.add_subplot()
    axes.scatter(flat[num_classes:, 0], flat[num_classes:, 1], c=[f"C{int(c) % 10}" for c in labels], s=6,
                 alpha=0.4, label="embedded samples")  # fmt: skip
    axes.scatter(flat[:num_classes, 0], flat[:num_classes, 1], c=[f"C{c % 10}" for c in range(num_classes)], s=260,
                 marker="*", edgecolors="black", label="global anchors")  # fmt: skip
    axes.set(xlabel="PC 1", ylabel="PC 2", title=f"FLIC anchors and embedded classes, round {round_idx + 1}")
    axes.legend(loc="best", fontsize=8)
    return figure


def atoms(features: Tensor, labels: Tensor, round_idx: int) -> Figure:
    """FedDaDiL's dictionary: each atom's support points in 2-D (one panel per atom), coloured by their label.

    Args:
        features: ``(K, n, d)`` atom supports.
        labels: ``(K, n, c)`` soft labels (each point takes its most likely class).
        round_idx: the round shown.

    """
    k, n, _ = features.shape
    flat = _to_2d(features.reshape(k * n, -1)).reshape(k, n, 2)
    figure = _figure(3.0 * k, 3.2)
    panels = figure.subplots(1, k, sharex=True, sharey=True, squeeze=False)[0]
    for atom, axes in enumerate(panels):
        classes = labels[atom].argmax(-1).tolist()
        axes.scatter(flat[atom, :, 0], flat[atom, :, 1], c=[f"C{c % 10}" for c in classes], s=8)
        axes.set(title=f"atom {atom + 1}", xlabel="PC 1")
    panels[0].set_ylabel("PC 2")
    figure.suptitle(f"FedDaDiL atoms, round {round_idx + 1}")
    return figure


def objective(rounds: Sequence[int], values: Sequence[float], name: str, title: str) -> Figure:
    """A per-round server objective (e.g. HyFEM's matching objective) against the round."""
    figure = _figure()
    axes = figure.add_subplot()
    axes.plot([r + 1 for r in rounds], list(values), marker="o")
    _integer_ticks(axes.xaxis)
    axes.set(xlabel="round", ylabel=name, title=title)
    return figure
