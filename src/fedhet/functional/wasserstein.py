r"""Optimal transport between labelled point clouds and their free-support Wasserstein barycenter (POT solvers).

A labelled empirical measure is a point cloud of features ``z`` of shape ``(n, d)`` with soft labels ``y`` of shape
``(n, c)`` (rows in the simplex), every point weighing :math:`1/n`. The ground cost between two labelled points is

.. math::
    C_{ij} = \|z_i - z'_j\|^2 + \beta \|y_i - y'_j\|^2,

with :math:`\beta` either fixed or, by default, the largest feature cost of the pair (detached), as in the DaDiL
reference code. Transport plans are computed without gradient (exact EMD through ``ot.emd``, or log-domain Sinkhorn)
and held fixed; gradients flow through the ground cost and the barycentric maps only (Danskin's theorem).

References: E. F. Montesuma, F. N. Mboula, A. Souloumiac, "Learning New Representations of Domains with Dataset
Dictionary Learning in Wasserstein Space" (DaDiL), ECAI 2023, Alg. 1; E. F. Montesuma et al., "Dataset Dictionary
Learning in a Wasserstein Space for Federated Domain Adaptation", 2024, eqs. 2-6 and 14; M. Cuturi, A. Doucet, "Fast
Computation of Wasserstein Barycenters", ICML 2014 (free-support fixed point).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import ot
import torch
from torch import Tensor

Solver = Literal["emd", "sinkhorn"]


def squared_distances(x: Tensor, y: Tensor) -> Tensor:
    r"""Pairwise squared Euclidean distances :math:`\|x_i - y_j\|^2`, differentiable in both arguments.

    Args:
        x: shape ``(n, d)``.
        y: shape ``(m, d)``.

    Returns:
        shape ``(n, m)``, non-negative.

    Example:
        >>> squared_distances(torch.zeros(1, 2), torch.tensor([[3.0, 4.0]]))
        tensor([[25.]])

    """
    return (x.pow(2).sum(1, keepdim=True) + y.pow(2).sum(1) - 2 * x @ y.T).clamp_min(0)


def ground_cost(
    z_p: Tensor, z_q: Tensor, y_p: Tensor | None = None, y_q: Tensor | None = None, beta: float | None = None
) -> Tensor:
    r"""Feature cost :math:`\|z_i - z'_j\|^2`, plus :math:`\beta \|y_i - y'_j\|^2` when both label sets are given.

    Args:
        z_p: features of the first cloud, shape ``(n, d)``.
        z_q: features of the second cloud, shape ``(m, d)``.
        y_p: soft labels of the first cloud, shape ``(n, c)``, or ``None`` for the feature-only cost.
        y_q: soft labels of the second cloud, shape ``(m, c)``, or ``None``.
        beta: weight of the label term; ``None`` takes the largest feature cost of the pair (detached).

    Returns:
        the cost matrix, shape ``(n, m)``.

    """
    cost = squared_distances(z_p, z_q)
    if y_p is None or y_q is None:
        return cost
    weight = cost.detach().max() if beta is None else beta
    return cost + weight * squared_distances(y_p, y_q)


@torch.no_grad()
def transport_plan(cost: Tensor, solver: Solver = "emd", reg: float = 0.05, max_iter: int | None = None) -> Tensor:
    r"""Optimal plan between two uniform measures for ``cost``, as a constant (no gradient).

    Exact EMD solves the linear program :math:`\min_{\gamma \in \Gamma} \langle \gamma, C \rangle` with
    :math:`\Gamma = \{\gamma \ge 0: \gamma 1 = 1/n, \gamma^\top 1 = 1/m\}` (``ot.emd``); ``"sinkhorn"`` adds the
    entropic term :math:`\text{reg} \cdot \langle \gamma, \log \gamma \rangle` on the cost divided by its maximum
    (``ot.sinkhorn``, log-stabilised scaling), as the DaDiL reference code's Sinkhorn option does.

    Args:
        cost: shape ``(n, m)``.
        solver: ``"emd"`` or ``"sinkhorn"``.
        reg: entropic regularisation of ``"sinkhorn"`` (relative to the largest cost).
        max_iter: iteration cap of the solver (``None``: 100,000 for EMD, 1,000 for Sinkhorn, as in the reference).

    Returns:
        the plan, shape ``(n, m)``, in ``cost``'s dtype and device; rows sum to :math:`1/n`, columns to :math:`1/m`.

    Example:
        >>> transport_plan(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
        tensor([[0.5000, 0.0000],
                [0.0000, 0.5000]])

    """
    n, m = cost.shape
    a, b = np.full(n, 1.0 / n), np.full(m, 1.0 / m)
    matrix = cost.detach().to("cpu", torch.float64).numpy()
    if solver == "emd":
        plan = ot.emd(a, b, matrix, numItermax=max_iter or 100_000)
    elif solver == "sinkhorn":
        scale = matrix.max() if matrix.max() > 0 else 1.0
        plan = ot.sinkhorn(a, b, matrix / scale, reg, method="sinkhorn_stabilized", numItermax=max_iter or 1_000)
    else:
        raise ValueError(f"transport_plan: solver must be 'emd' or 'sinkhorn', got {solver!r}")
    return torch.from_numpy(plan).to(device=cost.device, dtype=cost.dtype)


def wasserstein_cost(
    z_p: Tensor,
    z_q: Tensor,
    y_p: Tensor | None = None,
    y_q: Tensor | None = None,
    beta: float | None = None,
    solver: Solver = "emd",
    reg: float = 0.05,
) -> Tensor:
    r"""Transport cost :math:`\langle \gamma^*, C \rangle` between two uniform point clouds, the plan held fixed.

    With labels this is the labelled cost :math:`T_c` (DaDiL's source loss), without it :math:`T_2 = W_2^2` (the
    target's feature-only loss). The gradient is :math:`\langle \gamma^*, \partial C \rangle`.

    Args:
        z_p: features, shape ``(n, d)``.
        z_q: features, shape ``(m, d)``.
        y_p: soft labels, shape ``(n, c)``, or ``None``.
        y_q: soft labels, shape ``(m, c)``, or ``None``.
        beta: label weight (``None``: adaptive, see :func:`ground_cost`).
        solver: ``"emd"`` or ``"sinkhorn"``.
        reg: Sinkhorn regularisation.

    Returns:
        a scalar.

    Example:
        >>> z = torch.randn(5, 3)
        >>> round(float(wasserstein_cost(z, z + 1.0)), 4)  # a translation by (1, 1, 1) costs its squared norm
        3.0

    """
    cost = ground_cost(z_p, z_q, y_p, y_q, beta)
    return (transport_plan(cost, solver, reg) * cost).sum()


def wasserstein_barycenter(
    atoms_z: Sequence[Tensor] | Tensor,
    weights: Tensor,
    atoms_y: Sequence[Tensor] | Tensor | None = None,
    support_size: int | None = None,
    init: tuple[Tensor, Tensor | None] | None = None,
    n_iter: int = 10,
    tol: float = 1e-9,
    beta: float | None = None,
    solver: Solver = "emd",
    reg: float = 0.05,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor | None]:
    r"""Free-support barycenter :math:`B(\alpha; P) = \arg\min_B \sum_k \alpha_k T_c(P_k, B)` of labelled clouds.

    Fixed point (DaDiL Alg. 1): with the support :math:`(Z_B, Y_B)` fixed, solve one plan :math:`\pi_k` (shape
    ``(n_k, n_B)``) per atom for the ground cost of :func:`ground_cost`, then move every support point to its
    barycentric image :math:`Z_B = n_B \sum_k \alpha_k \pi_k^\top Z_k` (labels alike, so each row of :math:`Y_B` is a
    convex combination of atom label rows and stays in the simplex). Iterations run without gradient and stop after
    ``n_iter`` or once the weighted cost changes by less than ``tol``; the returned support is the last map evaluated
    once more with the final plans held fixed, so it is differentiable in the atoms and in ``weights``.

    Args:
        atoms_z: :math:`K` feature clouds, each ``(n_k, d)`` (or one ``(K, n, d)`` tensor).
        weights: barycentric coordinates :math:`\alpha`, shape ``(K,)`` (on the simplex).
        atoms_y: the atoms' soft labels, each ``(n_k, c)``; ``None`` for unlabelled clouds.
        support_size: :math:`n_B`; the first atom's size when ``None``. Ignored when ``init`` is given.
        init: the starting support ``(Z_B, Y_B)``; by default :math:`n_B` points drawn without replacement from the
            pooled atoms (with their labels).
        n_iter: fixed-point iterations (at least 1).
        tol: stop when the weighted transport cost changes by less than this.
        beta: label weight of the ground cost (``None``: adaptive).
        solver: ``"emd"`` or ``"sinkhorn"``.
        reg: Sinkhorn regularisation.
        generator: random source of the default initialisation.

    Returns:
        ``(Z_B, Y_B)`` of shapes ``(n_B, d)`` and ``(n_B, c)`` (``Y_B`` is ``None`` without labels).

    Example:
        >>> atom = torch.randn(6, 2)
        >>> z, _ = wasserstein_barycenter([atom, atom + 2.0], torch.tensor([0.5, 0.5]))
        >>> bool(torch.allclose(z.sort(0).values, (atom + 1.0).sort(0).values, atol=1e-5))
        True

    """
    if n_iter < 1:
        raise ValueError(f"wasserstein_barycenter: n_iter must be at least 1, got {n_iter}")
    labelled = atoms_y is not None
    if len(atoms_z) != weights.shape[0] or (atoms_y is not None and len(atoms_y) != len(atoms_z)):
        raise ValueError(
            f"wasserstein_barycenter: {len(atoms_z)} feature clouds, {weights.shape[0]} weights and"
            f" {len(atoms_y) if atoms_y is not None else 'no'} label sets; they must agree"
        )
    labels: list[Tensor | None] = list(atoms_y) if atoms_y is not None else [None] * len(atoms_z)
    if init is None:
        pooled_z = torch.cat(list(atoms_z))
        size = support_size or len(atoms_z[0])
        rows = torch.randperm(len(pooled_z), generator=generator)[:size].to(pooled_z.device)
        init = (pooled_z[rows], torch.cat(list(atoms_y))[rows] if atoms_y is not None else None)
    support_z, support_y = init[0].detach(), (init[1].detach() if init[1] is not None else None)

    def barycentric_map(plans: list[Tensor]) -> tuple[Tensor, Tensor | None]:
        n_b = plans[0].shape[1]
        z = sum(w * n_b * plan.T @ atom for w, plan, atom in zip(weights, plans, atoms_z, strict=True))
        if not labelled:
            return z, None
        y = sum(w * n_b * plan.T @ atom for w, plan, atom in zip(weights, plans, labels, strict=True))
        return z, y

    last = float("inf")
    with torch.no_grad():
        for _ in range(n_iter):
            costs = [ground_cost(z, support_z, y, support_y, beta) for z, y in zip(atoms_z, labels, strict=True)]
            plans = [transport_plan(cost, solver, reg) for cost in costs]
            loss = float(sum(w * (plan * cost).sum() for w, plan, cost in zip(weights, plans, costs, strict=True)))
            support_z, support_y = barycentric_map(plans)
            if abs(loss - last) < tol:
                break
            last = loss
    return barycentric_map(plans)
