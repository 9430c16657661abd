r"""HyFEM's server step for one-hidden-layer classifiers: neuron matching and matched averaging.

Zhang, Yin, Chen & Hong, "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and
Implementation", TMLR 2024, section 3 and algorithms 2-3. Client :math:`m` holds a classifier
:math:`x \mapsto W_2\,\sigma(W_1 x + b_1) + b_2` over its inputs only; the server's classifier covers every input
coordinate and has :math:`H_0 \ge H_m` hidden neurons. Client inputs map to server inputs by an index array
``cols`` (:math:`P_m`) and client hidden neuron :math:`j` to server neuron ``perm[j]`` (:math:`\Pi_m`, injective).
Selection matrices are never built: projecting the server onto a client is a gather, lifting a client is a
scatter. The per-block extractor update of the paper is :func:`~fedhet.functional.weighted_mean` over the holders of
each block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

CostMode = Literal["exact", "incoming", "descent"]


class Classifier(NamedTuple):
    """The weights of a one-hidden-layer classifier.

    Attributes:
        w1: hidden weight, shape ``(H, E)``.
        b1: hidden bias, shape ``(H,)``.
        w2: output weight, shape ``(K, H)``.
        b2: output bias, shape ``(K,)``.

    """

    w1: Tensor
    b1: Tensor
    w2: Tensor
    b2: Tensor


def project_classifier(server: Classifier, cols: Tensor, perm: Tensor) -> Classifier:
    r"""The server classifier seen by one client, :math:`\Pi_m w_0` (a gather; HyFEM eq. 16).

    Args:
        server: the server classifier, ``w1`` of shape ``(H_0, E_0)``.
        cols: the client's input coordinates in the server's input order, ``int64`` of shape ``(E_m,)``.
        perm: the server neuron of each client hidden neuron, distinct ``int64`` of shape ``(H_m,)``.

    Returns:
        ``w1[perm][:, cols]`` ``(H_m, E_m)``, ``b1[perm]``, ``w2[:, perm]`` ``(K, H_m)`` and a copy of ``b2``.

    Example:
        >>> server = Classifier(torch.arange(6.0).reshape(2, 3), torch.tensor([0.0, 1.0]), torch.eye(2), torch.zeros(2))
        >>> project_classifier(server, torch.tensor([2, 0]), torch.tensor([1])).w1.tolist()
        [[5.0, 3.0]]

    """
    return Classifier(server.w1[perm][:, cols], server.b1[perm], server.w2[:, perm], server.b2.clone())


def matched_average(
    clients: Sequence[Classifier],
    cols: Sequence[Tensor],
    perms: Sequence[Tensor],
    weights: Sequence[float],
    previous: Classifier,
) -> tuple[Classifier, Classifier]:
    r"""Server classifier for fixed matchings: every coordinate is the weighted mean of the client entries mapped to it.

    The closed form of HyFEM's server problem for fixed :math:`\Pi` (eq. 11),
    :math:`w_0 = (\sum_m p_m \Pi_m^\top \Pi_m)^{-1} \sum_m p_m \Pi_m^\top w_m`; :math:`\Pi_m^\top \Pi_m` is a 0/1
    coverage mask, so no matrix is inverted. Coordinates no client covers keep their ``previous`` value.

    Args:
        clients: each client's classifier, ``w1`` of shape ``(H_m, E_m)``.
        cols: each client's input coordinates in the server order, shape ``(E_m,)``.
        perms: each client's injective neuron map into ``[0, H_0)``, shape ``(H_m,)``.
        weights: each client's non-negative weight :math:`p_m`.
        previous: the server classifier before the update (its shapes are the server's).

    Returns:
        the new server classifier (``previous``'s dtype) and the total client weight on each of its coordinates
        (``float64``, same shapes; 0 where uncovered).

    Example:
        >>> prev = Classifier(torch.zeros(2, 2), torch.zeros(2), torch.zeros(1, 2), torch.zeros(1))
        >>> a = Classifier(torch.ones(1, 1), torch.ones(1), torch.ones(1, 1), torch.ones(1))
        >>> server, cover = matched_average([a], [torch.tensor([1])], [torch.tensor([0])], [2.0], prev)
        >>> server.w1.tolist(), cover.w1.tolist()
        ([[0.0, 1.0], [0.0, 0.0]], [[0.0, 2.0], [0.0, 0.0]])

    """
    totals = _Totals(previous)
    for client, c, p, weight in zip(clients, cols, perms, weights, strict=True):
        totals.add(client, c, p, weight)
    return totals.mean()


class _Totals:
    """Running weighted sums, weights and holder counts of client entries on the server's coordinates (float64)."""

    def __init__(self, previous: Classifier) -> None:
        self.previous = previous
        self.sums = [torch.zeros_like(t, dtype=torch.float64) for t in previous]
        self.mass = [torch.zeros_like(t, dtype=torch.float64) for t in previous]
        self.count = [torch.zeros_like(t, dtype=torch.int64) for t in previous]

    def add(self, client: Classifier, cols: Tensor, perm: Tensor, weight: float, sign: int = 1) -> None:
        """Add (``sign=1``) or take back (``sign=-1``) one client's entries, scattered to where they are matched."""
        targets: tuple[Any, ...] = ((perm[:, None], cols[None, :]), perm, (slice(None), perm), ...)  # w1, b1, w2, b2
        for k, index in enumerate(targets):
            self.sums[k][index] += sign * weight * client[k].double()
            self.mass[k][index] += sign * weight
            self.count[k][index] += sign

    def mean(self) -> tuple[Classifier, Classifier]:
        """The weighted means (``previous`` where no client is counted) and the weights (exactly 0 there)."""
        covered = [count > 0 for count in self.count]
        mass = [torch.where(c, m, 0.0) for c, m in zip(covered, self.mass, strict=True)]
        mean = [
            torch.where(c, s / m.clamp_min(1e-300), old.double()).to(old.dtype)
            for c, s, m, old in zip(covered, self.sums, mass, self.previous, strict=True)
        ]
        return Classifier(*mean), Classifier(*mass)


def matching_cost(
    client: Classifier,
    cols: Tensor,
    reference: Classifier,
    coverage: Classifier,
    weight: float,
    mode: CostMode = "exact",
) -> Tensor:
    r"""Cost of matching each client hidden neuron to each server neuron (HyFEM eq. 20), shape ``(H_m, H_0)``.

    Client neuron :math:`j` is described by its incoming row, bias and (except in ``"incoming"`` mode) outgoing
    column; server neuron :math:`a` by the same entries of ``reference`` restricted to the client's inputs. The cost
    is their squared distance:

    * ``"exact"``: incoming, bias and outgoing weights, so that the assignment minimises the client's own penalty
      :math:`\|w_m - \Pi_m w_0\|^2` against ``reference`` exactly;
    * ``"incoming"``: incoming weights and bias only, the paper's literal eq. 20;
    * ``"descent"``: every squared difference weighted by :math:`W/(W + p_m)`, :math:`W` the ``coverage`` of that
      coordinate by the other clients, so that the assignment minimises the whole server objective
      :math:`\min_{w_0} \sum_m p_m \|w_m - \Pi_m w_0\|^2` over this client's matching.

    Server neurons that no other client occupies (``coverage.b1 == 0``) cost the median of the occupied costs (the
    penalty for opening a new neuron; 0 when none is occupied).

    Args:
        client: the client's classifier, ``w1`` of shape ``(H_m, E_m)``.
        cols: its input coordinates in the server order, shape ``(E_m,)``.
        reference: the server classifier built from the other clients, ``w1`` of shape ``(H_0, E_0)``.
        coverage: the other clients' total weight on each coordinate of ``reference`` (as :func:`matched_average`).
        weight: the client's weight :math:`p_m` (used by ``"descent"``).
        mode: ``"exact"``, ``"incoming"`` or ``"descent"``.

    Returns:
        ``float64`` costs, shape ``(H_m, H_0)``.

    """
    if mode not in ("exact", "incoming", "descent"):
        raise ValueError(f"matching_cost: field 'mode' must be 'exact', 'incoming' or 'descent', got {mode!r}")

    def rows(net: Classifier, inputs: Tensor | slice) -> Tensor:
        parts = [net.w1[:, inputs], net.b1[:, None]] + ([net.w2.T] if mode != "incoming" else [])
        return torch.cat(parts, dim=1).double()

    x = rows(client, slice(None))
    s = rows(reference, cols)
    if mode == "descent":
        mass = rows(coverage, cols)
        omega = mass / (mass + weight)
    else:
        omega = torch.ones_like(s)
    cost = (x * x) @ omega.T - 2 * x @ (omega * s).T + (omega * s * s).sum(1)[None, :]
    occupied = coverage.b1 > 0
    if not bool(occupied.all()):
        taken = cost[:, occupied]
        cost[:, ~occupied] = taken.median() if taken.numel() else 0.0
    return cost.clamp_min(0.0)


def match_neurons(cost: Tensor) -> Tensor:
    """Injective assignment of client neurons (rows) to server neurons (columns) of least total cost (Hungarian).

    Args:
        cost: shape ``(H_m, H_0)`` with ``H_m <= H_0``.

    Returns:
        ``perm``, ``int64`` of shape ``(H_m,)``: the server neuron of each client neuron.

    Example:
        >>> match_neurons(torch.tensor([[5.0, 1.0, 3.0], [0.0, 2.0, 9.0]])).tolist()
        [1, 0]

    """
    if cost.shape[0] > cost.shape[1]:
        raise ValueError(f"match_neurons: a client has {cost.shape[0]} neurons but the server only {cost.shape[1]}")
    _, columns = linear_sum_assignment(cost.detach().cpu().double().numpy())
    return torch.as_tensor(columns, dtype=torch.int64)


def matching_objective(
    clients: Sequence[Classifier],
    cols: Sequence[Tensor],
    perms: Sequence[Tensor],
    weights: Sequence[float],
    server: Classifier,
) -> float:
    r""":math:`\sum_m p_m \frac12 \|w_m - \Pi_m w_0\|^2`, the classifier part of HyFEM's objective (eq. 6)."""
    total = 0.0
    for client, c, p, weight in zip(clients, cols, perms, weights, strict=True):
        projected = project_classifier(server, c, p)
        gap = sum(float((a.double() - b.double()).pow(2).sum()) for a, b in zip(client, projected, strict=True))
        total += weight * 0.5 * gap
    return total


def model_matching(
    clients: Sequence[Classifier],
    cols: Sequence[Tensor],
    perms: Sequence[Tensor],
    weights: Sequence[float],
    previous: Classifier,
    passes: int,
    mode: CostMode = "exact",
    generator: torch.Generator | None = None,
) -> tuple[Classifier, list[Tensor]]:
    r"""HyFEM's ModelMatching (algorithm 3): re-match one random client per pass, then average the matched weights.

    Each pass draws a client :math:`m'`, builds the server classifier from the other clients under their current
    matchings (:func:`matched_average`, uncovered coordinates from ``previous``), and re-assigns :math:`m'`'s hidden
    neurons by the Hungarian method on :func:`matching_cost`. The result is :func:`matched_average` of every client
    under the final matchings. The leave-one-out server is kept as running sums from which the drawn client is taken
    out and put back, so a pass costs one client's scatter, not a sum over all clients. With one client there is
    nothing to match against: only the average is taken.

    Args:
        clients: each client's classifier, ``w1`` of shape ``(H_m, E_m)``.
        cols: each client's input coordinates in the server order, shape ``(E_m,)``.
        perms: each client's current neuron map, shape ``(H_m,)``.
        weights: each client's weight :math:`p_m`.
        previous: the server classifier of the previous round, ``w1`` of shape ``(H_0, E_0)``.
        passes: number of matching passes :math:`P` (0 keeps ``perms``).
        mode: the cost, see :func:`matching_cost`.
        generator: draws the client of each pass.

    Returns:
        the new server classifier and the new matchings.

    """
    perms = list(perms)
    totals = _Totals(previous)
    for client, c, p, weight in zip(clients, cols, perms, weights, strict=True):
        totals.add(client, c, p, weight)
    if len(clients) > 1:
        for _ in range(passes):
            m = int(torch.randint(len(clients), (1,), generator=generator))
            totals.add(clients[m], cols[m], perms[m], weights[m], sign=-1)  # the server without m (leave one out)
            reference, coverage = totals.mean()
            perms[m] = match_neurons(matching_cost(clients[m], cols[m], reference, coverage, weights[m], mode))
            totals.add(clients[m], cols[m], perms[m], weights[m])
    return totals.mean()[0], perms
