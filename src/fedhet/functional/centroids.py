"""Per-class feature statistics: centroids, their count-weighted aggregation, FedPAC's head statistics and FA loss.

Reference: J. Xu, X. Tong, S.-L. Huang, "Personalized Federated Learning with Feature Alignment and Classifier
Collaboration", ICLR 2023 (eqs. 3, 17, 19, 43-45).
"""

from __future__ import annotations

import torch
from torch import Tensor


def class_feature_sums(features: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    r"""Per-class sums of features and of squared feature norms, and per-class counts (one pass, mergeable).

    Args:
        features: features :math:`f(x_l)`, shape ``(N, d)``.
        labels: integer labels in ``[0, num_classes)``, shape ``(N,)``.
        num_classes: :math:`K`.

    Returns:
        ``(counts, sums, square_sums)`` of shapes ``(K,)``, ``(K, d)`` and ``(K,)``, where
        ``sums[k]`` :math:`= \sum_{l: y_l = k} f(x_l)` and ``square_sums[k]`` :math:`= \sum_{l: y_l = k} \|f(x_l)\|^2`.

    """
    if features.ndim != 2 or labels.shape != features.shape[:1]:
        raise ValueError(
            f"class_feature_sums: features must be (N, d) and labels (N,), got {tuple(features.shape)} and"
            f" {tuple(labels.shape)}"
        )
    labels = labels.long()
    counts = torch.bincount(labels, minlength=num_classes)[:num_classes].to(features.dtype)
    sums = features.new_zeros(num_classes, features.shape[1]).index_add_(0, labels, features)
    square_sums = features.new_zeros(num_classes).index_add_(0, labels, features.pow(2).sum(1))
    return counts, sums, square_sums


def class_centroids(features: Tensor, labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    r"""Class means of the features (eq. 17): :math:`\hat c_k = \frac{1}{n_k} \sum_{l: y_l = k} f(x_l)`.

    Args:
        features: shape ``(N, d)``.
        labels: shape ``(N,)``, integers in ``[0, num_classes)``.
        num_classes: :math:`K`.

    Returns:
        ``(centroids, counts)``: shapes ``(K, d)`` and ``(K,)``; rows of absent classes are zero.

    """
    counts, sums, _ = class_feature_sums(features, labels, num_classes)
    return sums / counts.clamp_min(1).unsqueeze(1), counts


def aggregate_centroids(centroids: Tensor, counts: Tensor) -> tuple[Tensor, Tensor]:
    r"""Count-weighted mean of the clients' centroids over the clients holding each class (eq. 19).

    .. math::
        c_k = \frac{\sum_i n_{i,k} \hat c_{i,k}}{\sum_i n_{i,k}}

    which equals the centroid of the pooled features. Classes held by nobody get a zero row and ``total == 0``.

    Args:
        centroids: the clients' centroids, shape ``(m, K, d)`` (rows of absent classes are ignored).
        counts: the clients' class counts :math:`n_{i,k}`, shape ``(m, K)``.

    Returns:
        ``(global_centroids, totals)``: shapes ``(K, d)`` and ``(K,)`` with :math:`\sum_i n_{i,k}`.

    """
    if centroids.ndim != 3 or counts.shape != centroids.shape[:2]:
        raise ValueError(
            f"aggregate_centroids: centroids must be (m, K, d) and counts (m, K), got {tuple(centroids.shape)} and"
            f" {tuple(counts.shape)}"
        )
    counts = counts.to(centroids.dtype)
    totals = counts.sum(0)
    # absent classes may carry anything in their centroid rows: weight zero must mean "ignored", even for NaN
    weighted = torch.where(counts.unsqueeze(-1) > 0, centroids * counts.unsqueeze(-1), torch.zeros_like(centroids))
    return weighted.sum(0) / totals.clamp_min(1).unsqueeze(1), totals


def head_statistics(counts: Tensor, sums: Tensor, square_sums: Tensor) -> tuple[Tensor, Tensor]:
    r"""FedPAC's statistics of one client for classifier collaboration (eqs. 44-45, with :math:`\Lambda_f = I`).

    With :math:`\hat p(k) = n_k / n`, class means :math:`\mu_k` and mean squared norms :math:`s_k` of the features,

    .. math::
        H[k] = \hat p(k)\, \mu_k, \qquad
        V = \sum_k \hat p(k)\, s_k - \hat p(k)^2 \|\mu_k\|^2 .

    Args:
        counts: class counts, shape ``(K,)``.
        sums: per-class feature sums, shape ``(K, d)``.
        square_sums: per-class sums of squared feature norms, shape ``(K,)``.

    Returns:
        ``(H, V)``: shape ``(K, d)`` (rows of absent classes are zero) and a scalar ``V >= 0``.

    """
    n = counts.sum().clamp_min(1)
    prior = counts / n
    means = sums / counts.clamp_min(1).unsqueeze(1)
    mean_squares = square_sums / counts.clamp_min(1)
    h = prior.unsqueeze(1) * means
    v = (prior * mean_squares - prior.pow(2) * means.pow(2).sum(1)).sum()
    return h, v.clamp_min(0)


def feature_alignment_losses(
    features: Tensor,
    labels: Tensor,
    centroids: Tensor,
    available: Tensor | None = None,
    fallback: Tensor | None = None,
) -> Tensor:
    r"""FedPAC's feature-alignment regulariser (eq. 3, without the factor :math:`\lambda`), one term per sample.

    .. math::
        r_l = \frac{1}{d} \| f(x_l) - c_{y_l} \|_2^2, \qquad R = \frac{1}{|B|} \sum_{l \in B} r_l

    The batch's regulariser :math:`R` is their mean; a batch of ``B`` samples adds them to its per-sample losses
    (FedPAC's ``sample_losses``, also trained in stacks under ``torch.func.vmap``: no data-dependent branch). The
    centroids are constants (no gradient). A class with no global centroid (``available[k]`` false) aligns to the
    ``fallback`` row (the client's own centroid).

    Args:
        features: shape ``(B, d)``.
        labels: shape ``(B,)``.
        centroids: global centroids, shape ``(K, d)`` (constants: no gradient).
        available: which classes have a global centroid, shape ``(K,)``; needs ``fallback`` (all when ``None``).
        fallback: the client's own centroids for the classes without a global one, shape ``(K, d)``.

    Returns:
        shape ``(B,)``.

    Raises:
        ValueError: ``available`` without ``fallback`` (a sample without a target has no term of its own).

    """
    targets = centroids.detach()
    if available is not None:
        if fallback is None:
            raise ValueError("feature_alignment_losses: 'available' needs a 'fallback' target for the other classes")
        targets = _alignment_targets(centroids, available, fallback)
    return (features - targets[labels].to(features.dtype)).pow(2).mean(1)


def _alignment_targets(centroids: Tensor, available: Tensor, fallback: Tensor) -> Tensor:
    """The global centroid of each available class, else the fallback row (both constants)."""
    return torch.where(available.to(torch.bool).unsqueeze(1), centroids.detach(), fallback.detach())
