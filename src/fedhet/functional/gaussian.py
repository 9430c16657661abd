r"""Gaussians in a latent space: class moments, the closed-form 2-Wasserstein distance and barycenters.

The 2-Wasserstein distance between :math:`\mathcal{N}(m_1, \Sigma_1)` and :math:`\mathcal{N}(m_2, \Sigma_2)` has the
closed form (Dowson & Landau 1982; Gelbrich 1990)

.. math::
    W_2^2 = \|m_1 - m_2\|^2 + \operatorname{Tr}\Sigma_1 + \operatorname{Tr}\Sigma_2
    - 2 \operatorname{Tr}\big(\Sigma_1^{1/2} \Sigma_2 \Sigma_1^{1/2}\big)^{1/2}

whose covariance part is the squared Bures distance. FLIC (Rakotomamonjy et al., "Personalised Federated Learning On
Heterogeneous Feature Spaces", TMLR 2024, section 4) uses it to pull each client's embedded class-conditionals towards
shared Gaussian anchors, and averages the anchors on the server as a Wasserstein barycenter.

Every function is batched over leading dimensions and computes in ``float64`` (results come back in the input dtype).
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_EPS = 1e-12
"""Eigenvalues at or below it count as zero in the Bures term, so that gradients stay finite at singular covariances."""


def class_moments(
    features: Tensor, labels: Tensor, num_classes: int, mask: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Per-class count, mean and unbiased covariance of a batch of features.

    .. math::
        \hat m_c = \frac{1}{n_c} \sum_{l: y_l = c} z_l, \qquad
        \hat S_c = \frac{1}{n_c - 1} \sum_{l: y_l = c} (z_l - \hat m_c)(z_l - \hat m_c)^\top

    with :math:`\hat S_c = 0` when :math:`n_c < 2` and :math:`\hat m_c = 0` when :math:`n_c = 0`. Differentiable in
    ``features`` (nothing is detached). Every shape is fixed by ``num_classes`` (no data-dependent ``unique``), so the
    function runs under ``torch.func.vmap``.

    Args:
        features: embeddings :math:`z_l`, shape ``(N, k)``.
        labels: integer labels in ``[0, num_classes)``, shape ``(N,)``.
        num_classes: :math:`C`.
        mask: which rows count, boolean of shape ``(N,)`` (e.g. the real rows of a zero-padded batch); all by default.

    Returns:
        ``(counts, means, covariances)`` of shapes ``(C,)``, ``(C, k)``, ``(C, k, k)``, in the features' dtype.

    Example:
        >>> z = torch.tensor([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0]])
        >>> counts, means, covs = class_moments(z, torch.tensor([0, 0, 1]), 3)
        >>> counts.tolist(), means[0].tolist(), covs[0].tolist(), covs[1].abs().sum().item()
        ([2.0, 1.0, 0.0], [1.0, 0.0], [[2.0, 0.0], [0.0, 0.0]], 0.0)

    """
    if features.ndim != 2 or labels.shape != features.shape[:1]:
        raise ValueError(
            f"class_moments: features must be (N, k) and labels (N,), got {tuple(features.shape)} and"
            f" {tuple(labels.shape)}"
        )
    labels = labels.long()
    onehot = torch.nn.functional.one_hot(labels, num_classes).to(features.dtype)  # (N, C)
    if mask is not None:
        onehot = onehot * mask.unsqueeze(-1)
    counts = onehot.sum(0)
    means = (onehot.T @ features) / counts.clamp_min(1).unsqueeze(1)
    centred = features - means[labels]
    scatter = torch.einsum("nc,ni,nj->cij", onehot, centred, centred)
    covariances = scatter / (counts - 1).clamp_min(1)[:, None, None]
    return counts, means, covariances


def psd_sqrt(matrix: Tensor) -> Tensor:
    r"""The symmetric square root :math:`S^{1/2}` of symmetric PSD matrices (negative eigenvalues clamped to 0).

    Any factor :math:`L` with :math:`L L^\top = S` may stand for :math:`S` in :func:`gaussian_w2_sq`; this one is the
    symmetric one. Its gradient is unstable at repeated eigenvalues; use it on constants.

    Args:
        matrix: shape ``(..., k, k)``.

    Returns:
        shape ``(..., k, k)``, in the input dtype.

    """
    values, vectors = torch.linalg.eigh(matrix.double())
    root: Tensor = (vectors * values.clamp_min(0).sqrt().unsqueeze(-2)) @ vectors.mT
    return root.to(matrix.dtype)


def bures_sq(factor: Tensor | None, covariance: Tensor, eps: float = DEFAULT_EPS) -> Tensor:
    r"""Squared Bures distance :math:`B^2(L L^\top, S)` from a factor of the first covariance.

    With :math:`\Sigma = L L^\top`, the matrices :math:`\Sigma^{1/2} S \Sigma^{1/2}` and :math:`L^\top S L` share
    their spectrum, so

    .. math::
        B^2(\Sigma, S) = \|L\|_F^2 + \operatorname{Tr} S - 2 \sum_{j: \lambda_j > \epsilon} \sqrt{\lambda_j(L^\top S L)}

    Eigenvalues at or below :math:`\epsilon` (the null space of a singular :math:`S`, and rounding) count as zero and
    pass no gradient, so the value and the gradients in :math:`L` and :math:`S` stay finite when :math:`S` is singular
    (fewer samples of a class in a batch than dimensions); the gradient of a square root near zero is bounded by
    :math:`1 / (2\sqrt{\epsilon})`. Only an eigenvalue decomposition of a symmetric matrix is needed.

    Args:
        factor: :math:`L`, shape ``(..., k, k)``; ``None`` for :math:`\Sigma = I`.
        covariance: :math:`S`, symmetric PSD, shape ``(..., k, k)``.
        eps: :math:`\epsilon`.

    Returns:
        shape ``(...)``, in the dtype of ``covariance``.

    """
    s = covariance.double()
    if factor is None:
        inner, trace_sigma = s, torch.full(s.shape[:-2], float(s.shape[-1]), dtype=s.dtype, device=s.device)
    else:
        f = factor.double()
        inner, trace_sigma = f.mT @ s @ f, f.pow(2).sum((-2, -1))
    inner = (inner + inner.mT) / 2
    values = torch.linalg.eigvalsh(inner)
    roots = (values.clamp_min(eps).sqrt() * (values > eps)).sum(-1)
    value: Tensor = trace_sigma + s.diagonal(dim1=-2, dim2=-1).sum(-1) - 2 * roots
    return value.to(covariance.dtype)


def gaussian_w2_sq(
    mean1: Tensor, factor1: Tensor | None, mean2: Tensor, covariance2: Tensor, eps: float = DEFAULT_EPS
) -> Tensor:
    r"""Closed-form :math:`W_2^2(\mathcal{N}(m_1, L L^\top), \mathcal{N}(m_2, S))`: the mean term plus :func:`bures_sq`.

    FLIC's alignment term (Rakotomamonjy et al., TMLR 2024, eq. 3) with an anchor :math:`\mathcal{N}(v_c, L_c L_c^\top)`
    as the first Gaussian and a client's embedded class-conditional :math:`\mathcal{N}(\hat m_c, \hat S_c)` as the
    second. To compare two Gaussians given by covariances, pass ``psd_sqrt(covariance1)`` as ``factor1``.

    Args:
        mean1: :math:`m_1`, shape ``(..., k)``.
        factor1: :math:`L`, shape ``(..., k, k)``, or ``None`` for the identity covariance.
        mean2: :math:`m_2`, shape ``(..., k)``.
        covariance2: :math:`S`, shape ``(..., k, k)``.
        eps: see :func:`bures_sq`.

    Returns:
        shape ``(...)``, in the dtype of ``mean2``.

    Example:
        >>> k = 3
        >>> m, S = torch.zeros(k), 4.0 * torch.eye(k)  # N(0, 4 I) vs N(1, I): 3 + k (2 - 1)^2
        >>> round(float(gaussian_w2_sq(torch.ones(k), None, m, S)), 6)
        6.0

    """
    mean_term = (mean1.double() - mean2.double()).pow(2).sum(-1)
    return (mean_term + bures_sq(factor1, covariance2, eps).double()).to(mean2.dtype)


def gaussian_barycenter(
    means: Tensor,
    weights: Tensor,
    covariances: Tensor | None = None,
    iterations: int = 50,
    tol: float = 1e-10,
) -> tuple[Tensor, Tensor | None]:
    r"""The 2-Wasserstein barycenter of Gaussians :math:`\mathcal{N}(m_i, \Sigma_i)` with weights :math:`w_i`.

    Its mean is :math:`\bar m = \sum_i w_i m_i / \sum_i w_i` (for equal, fixed covariances this is the whole
    barycenter, FLIC's anchor aggregation). Its covariance is the fixed point of (Álvarez-Esteban et al., "A
    fixed-point approach to barycenters in Wasserstein space", J. Math. Anal. Appl. 2016)

    .. math::
        \bar\Sigma \leftarrow \bar\Sigma^{-1/2}
        \Big(\sum_i w_i \big(\bar\Sigma^{1/2} \Sigma_i \bar\Sigma^{1/2}\big)^{1/2}\Big)^2 \bar\Sigma^{-1/2}

    started from the weighted mean of the covariances.

    Args:
        means: :math:`m_i`, shape ``(N, ..., k)`` (``N`` Gaussians per barycenter, e.g. ``(clients, classes, k)``).
        weights: :math:`w_i \ge 0`, shape ``(N, ...)``; normalised over ``N``. A barycenter whose weights are all zero
            is taken with equal weights (the caller decides what to keep there).
        covariances: :math:`\Sigma_i`, shape ``(N, ..., k, k)``; ``None`` for the means alone.
        iterations: most fixed-point iterations.
        tol: stop when the largest absolute change of :math:`\bar\Sigma` is below it.

    Returns:
        ``(mean, covariance)``: shapes ``(..., k)`` and ``(..., k, k)`` (``None`` without ``covariances``).

    Example:
        >>> means = torch.tensor([[0.0, 0.0], [4.0, 2.0]])
        >>> covs = torch.stack([torch.eye(2), 9.0 * torch.eye(2)])
        >>> m, S = gaussian_barycenter(means, torch.tensor([3.0, 1.0]), covs)
        >>> m.tolist(), [round(x, 4) for x in S.diagonal().tolist()]  # sqrt: (3 * 1 + 1 * 3) / 4 = 1.5
        ([1.0, 0.5], [2.25, 2.25])

    """
    w = weights.double()
    w = torch.where(w.sum(0, keepdim=True) > 0, w, torch.ones_like(w))
    w = w / w.sum(0, keepdim=True)
    mean = (w.unsqueeze(-1) * means.double()).sum(0).to(means.dtype)
    if covariances is None:
        return mean, None
    sigmas = covariances.double()
    wc = w[..., None, None]
    bar = (wc * sigmas).sum(0)
    for _ in range(iterations):
        values, vectors = torch.linalg.eigh(bar)
        values = values.clamp_min(torch.finfo(torch.float64).tiny)
        root = (vectors * values.sqrt().unsqueeze(-2)) @ vectors.mT
        inv_root = (vectors * values.rsqrt().unsqueeze(-2)) @ vectors.mT
        mixed = (wc * psd_sqrt(root @ sigmas @ root)).sum(0)
        new = inv_root @ mixed @ mixed @ inv_root
        new = (new + new.mT) / 2
        change = (new - bar).abs().amax()
        bar = new
        if change <= tol:
            break
    return mean, bar.to(covariances.dtype)


def regression_anchor_means(targets: Tensor, start: Tensor, end: Tensor) -> Tensor:
    r"""Anchor means of FLIC's regression variant: :math:`m(y) = y\,a + (1 - y)\,b` (Rakotomamonjy et al., section 4).

    The anchor of a target :math:`y` is :math:`\mathcal{N}(m(y), I_k)`; for one sample :math:`z` of target :math:`y`,
    :math:`W_2^2(\mathcal{N}(m(y), I), \delta_z) = \|z - m(y)\|^2 + k`, so the alignment term maps the inputs onto the
    segment between ``end`` (:math:`y = 0`) and ``start`` (:math:`y = 1`).

    Args:
        targets: :math:`y`, shape ``(N,)``.
        start: :math:`a`, shape ``(k,)``.
        end: :math:`b \ne a`, shape ``(k,)``.

    Returns:
        shape ``(N, k)``.

    Example:
        >>> regression_anchor_means(torch.tensor([0.0, 0.5, 1.0]), torch.ones(2), torch.zeros(2)).tolist()
        [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]]

    """
    return targets.unsqueeze(-1) * start + (1 - targets.unsqueeze(-1)) * end
