"""FedPAC's classifier collaboration: a convex QP on the probability simplex per client, then head mixing.

Reference: J. Xu, X. Tong, S.-L. Huang, "Personalized Federated Learning with Feature Alignment and Classifier
Collaboration", ICLR 2023 (Theorem 1, eqs. 4, 11, 46). Dependency-free, in
float64: a primal active-set method, with accelerated projected gradient (FISTA) on the simplex as a fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import torch
from torch import Tensor


def project_simplex(v: Tensor) -> Tensor:
    r"""Euclidean projection of each row of ``v`` onto the probability simplex :math:`\{a \ge 0, \sum a = 1\}`.

    Args:
        v: shape ``(m,)`` or ``(b, m)``.

    Returns:
        Same shape as ``v``.

    """
    u, _ = torch.sort(v, dim=-1, descending=True)
    css = u.cumsum(-1) - 1
    ks = torch.arange(1, v.shape[-1] + 1, dtype=v.dtype, device=v.device)
    rho = (u - css / ks > 0).sum(-1, keepdim=True).clamp_min(1)
    theta = css.gather(-1, rho - 1) / rho.to(v.dtype)
    return (v - theta).clamp_min(0)


def repair_psd(matrix: Tensor, min_eigenvalue: float = 0.0) -> Tensor:
    """Symmetrise ``matrix`` (shape ``(m, m)``) and clamp its eigenvalues to at least ``min_eigenvalue``."""
    sym = (matrix + matrix.transpose(-1, -2)) / 2
    scale = float(sym.diagonal().abs().max()) if sym.numel() else 0.0
    jitter = max(min_eigenvalue, 0.0) + 1e-12 * (scale or 1.0)
    eye = torch.eye(sym.shape[-1], dtype=sym.dtype, device=sym.device)
    if int(torch.linalg.cholesky_ex(sym + (jitter - min_eigenvalue) * eye).info) == 0 and min_eigenvalue <= 0:
        return sym  # positive definite up to round-off: no (slow) eigendecomposition needed
    values, vectors = torch.linalg.eigh(sym)
    if bool((values >= min_eigenvalue).all()):
        return sym
    return cast(Tensor, (vectors * values.clamp_min(min_eigenvalue)) @ vectors.transpose(-1, -2))


def _kkt_polish(p: Tensor, alpha: Tensor, support_tol: float, tol: float) -> Tensor | None:
    """The exact minimiser on the support of ``alpha`` if it satisfies the KKT conditions, else ``None``."""
    support = alpha > support_tol
    s = int(support.sum())
    if s == 0:
        return None
    kkt = p.new_zeros(s + 1, s + 1)
    kkt[:s, :s] = p[support][:, support]
    kkt[:s, s] = 1
    kkt[s, :s] = 1
    rhs = p.new_zeros(s + 1)
    rhs[s] = 1
    try:
        solution = torch.linalg.solve(kkt, rhs)
    except RuntimeError:  # singular on this support
        return None
    sub = solution[:s]
    if not bool(torch.isfinite(sub).all()) or bool((sub < -tol).any()):
        return None
    candidate = torch.zeros_like(alpha)
    candidate[support] = sub.clamp_min(0)
    candidate = candidate / candidate.sum()
    grad = p @ candidate
    level = grad[support].mean()
    scale = max(float(grad.abs().max()), 1e-300)
    if bool((grad[~support] < level - tol * scale).any()):  # a left-out coordinate would lower the objective
        return None
    return candidate


def _active_set(p: Tensor, max_iter: int, tol: float = 1e-12) -> Tensor | None:
    """Primal active-set method for ``min a'Pa`` on the simplex; ``None`` if it does not finish in ``max_iter`` steps.

    Starts at the best vertex; adds the coordinate with the most negative reduced gradient, solves the KKT system on
    the support, and steps back to the boundary (dropping coordinates) when that solution leaves the simplex.
    """
    m = p.shape[0]
    scale = float(p.diagonal().abs().max()) or 1.0
    ridge = p + (1e-12 * scale) * torch.eye(m, dtype=p.dtype, device=p.device)
    alpha = torch.zeros(m, dtype=p.dtype, device=p.device)
    first = int(torch.argmin(p.diagonal()))
    alpha[first] = 1.0
    support = [first]
    for _ in range(max_iter):
        grad = ridge @ alpha
        level = float(grad[support].mean())
        outside = torch.ones(m, dtype=torch.bool, device=p.device)
        outside[support] = False
        if not bool(outside.any()):
            return alpha
        candidates = torch.where(outside, grad, torch.full_like(grad, float("inf")))
        j = int(torch.argmin(candidates))
        if float(candidates[j]) >= level - tol * scale:
            return alpha  # KKT: no coordinate outside the support lowers the objective
        support.append(j)
        while True:  # solve on the support; step back to the boundary while the solution is infeasible
            idx = torch.tensor(support, device=p.device)
            s = len(support)
            kkt = p.new_zeros(s + 1, s + 1)
            kkt[:s, :s] = ridge[idx][:, idx]
            kkt[:s, s] = 1
            kkt[s, :s] = 1
            rhs = p.new_zeros(s + 1)
            rhs[s] = 1
            try:
                z = torch.linalg.solve(kkt, rhs)[:s]
            except RuntimeError:
                return None
            if not bool(torch.isfinite(z).all()):
                return None
            current = alpha[idx]
            if bool((z >= 0).all()):
                alpha = torch.zeros_like(alpha)
                alpha[idx] = z
                break
            negative = z < 0
            ratios = current[negative] / (current[negative] - z[negative])
            t = float(ratios.min().clamp(0, 1))
            step = current + t * (z - current)
            step[step <= 1e-15] = 0
            alpha = torch.zeros_like(alpha)
            alpha[idx] = step
            support = [k for k in support if float(alpha[k]) > 0]
            if not support:
                return None
    return None


def solve_simplex_qp(p: Tensor, max_iter: int = 5000, tol: float = 1e-10, check_every: int = 20) -> Tensor:
    r"""Minimise :math:`\alpha^\top P \alpha` over the probability simplex (eq. 46), for a PSD ``P``.

    ``P`` is symmetrised and its negative eigenvalues clamped to zero first (the "PSD repair"); the problem is solved in
    float64 by a primal active-set method (exact, a few steps per partner), falling back to FISTA with the Euclidean
    projection onto the simplex and adaptive restart, polished by an exact solve on its support when that passes the
    KKT check.

    Args:
        p: the quadratic form, shape ``(m, m)``.
        max_iter: FISTA iterations at most.
        tol: stop when an iterate moves by less than this (max-norm).
        check_every: try the exact KKT solve on the current support every this many iterations; it ends the
            solve as soon as it passes.

    Returns:
        The weights, shape ``(m,)``, float64, non-negative and summing to one.

    Raises:
        ValueError: if ``p`` is not square or not finite.

    """
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"solve_simplex_qp: P must be square, got shape {tuple(p.shape)}")
    if not bool(torch.isfinite(p).all()):
        raise ValueError("solve_simplex_qp: P holds NaN or infinite entries")
    m = p.shape[0]
    p = repair_psd(p.to(torch.float64))
    alpha = torch.full((m,), 1.0 / m, dtype=torch.float64, device=p.device)
    if m == 1 or not bool((p != 0).any()):
        return alpha
    exact = _active_set(p, max_iter=4 * m + 20)
    if exact is not None:
        return exact / exact.sum()
    lipschitz = 2 * float(p.abs().sum(1).max())  # Gershgorin bound on the gradient's Lipschitz constant
    step = 1.0 / lipschitz
    y, t = alpha.clone(), 1.0
    for iteration in range(1, max_iter + 1):
        if iteration % check_every == 0:  # on the right support, the KKT solve is exact (and optimal: P is PSD)
            polished = _kkt_polish(p, alpha, support_tol=1e-7, tol=1e-9)
            if polished is not None:
                return polished
        new = project_simplex(y - step * 2 * (p @ y))
        if float((new - alpha) @ (p @ (new + alpha))) > 0:  # objective went up: restart the momentum
            y, t = alpha.clone(), 1.0
            continue
        t_next = (1 + (1 + 4 * t * t) ** 0.5) / 2
        y = new + ((t - 1) / t_next) * (new - alpha)
        moved = float((new - alpha).abs().max())
        alpha, t = new, t_next
        if moved < tol:
            break
    polished = _kkt_polish(p, alpha, support_tol=1e-7, tol=1e-9)
    return alpha if polished is None else polished


def collaboration_matrix(h: Tensor, v: Tensor, target: int) -> Tensor:
    r"""The QP matrix of client ``target`` (eq. 46): :math:`P = \mathrm{diag}(v) + G G^\top`, :math:`G_j = H_i - H_j`.

    .. math::
        \alpha^\top P \alpha = \Big\| H_i - \sum_j \alpha_j H_j \Big\|_F^2 + \sum_j \alpha_j^2 \frac{V_j}{n_j}
        \quad \text{for } \textstyle\sum_j \alpha_j = 1 .

    Args:
        h: the candidates' :math:`H_j`, shape ``(m, K, d)`` (or ``(m, D)``).
        v: the candidates' :math:`V_j / n_j`, shape ``(m,)``.
        target: index :math:`i` of the client whose weights are sought.

    Returns:
        Shape ``(m, m)``, float64.

    """
    flat = h.reshape(h.shape[0], -1).to(torch.float64)
    g = flat[target] - flat
    return torch.diag(v.to(torch.float64).clamp_min(0)) + g @ g.T


def combination_weights(h: Tensor, v: Tensor, threshold: float = 1e-3, max_iter: int = 5000) -> Tensor:
    r"""FedPAC's combination weights :math:`\alpha_{ij}` for every client ``i`` (one QP each, eq. 11/46).

    Weights at or below ``threshold`` are zeroed and each row is renormalised, as in the reference code; a client
    whose QP cannot be solved (non-finite statistics) keeps its own head, :math:`\alpha_i = e_i`.

    Args:
        h: the clients' :math:`H_j`, shape ``(m, K, d)``.
        v: the clients' :math:`V_j / n_j`, shape ``(m,)``.
        threshold: weights :math:`\le` this are dropped.
        max_iter: FISTA iterations per QP at most.

    Returns:
        Shape ``(m, m)``, float64; row ``i`` is on the simplex.

    """
    m = h.shape[0]
    if v.shape != (m,):
        raise ValueError(f"combination_weights: v must have shape ({m},), got {tuple(v.shape)}")
    weights = torch.eye(m, dtype=torch.float64, device=h.device)
    flat = h.reshape(m, -1).to(torch.float64)
    # all the P_i from one Gram matrix: (H_i - H_j)·(H_i - H_j') = M_ii - M_ij - M_ij' + M_jj'
    gram = flat @ flat.T
    diag_v = torch.diag(v.to(torch.float64).clamp_min(0))
    for i in range(m):
        p = gram[i, i] - gram[i].unsqueeze(0) - gram[i].unsqueeze(1) + gram + diag_v
        try:
            alpha = solve_simplex_qp(p, max_iter=max_iter)
        except (ValueError, RuntimeError):
            continue
        alpha = torch.where(alpha > threshold, alpha, torch.zeros_like(alpha))
        if float(alpha.sum()) <= 0 or not bool(torch.isfinite(alpha).all()):
            continue
        weights[i] = alpha / alpha.sum()
    return weights


def mix_heads(weights: Tensor, heads: Mapping[str, Tensor]) -> dict[str, Tensor]:
    r"""Personalised heads :math:`\hat\phi_i = \sum_j \alpha_{ij} \phi_j` (eq. 4), for weight and bias alike.

    Args:
        weights: :math:`\alpha`, shape ``(m, m)`` (rows on the simplex).
        heads: name -> the clients' stacked head tensors, shape ``(m, *shape)``.

    Returns:
        name -> mixed heads, shape ``(m, *shape)``, in the dtype of each head tensor.

    """
    mixed = {}
    for name, stacked in heads.items():
        flat = stacked.reshape(stacked.shape[0], -1).to(weights.dtype)
        mixed[name] = (weights @ flat).reshape(stacked.shape).to(stacked.dtype)
    return mixed
