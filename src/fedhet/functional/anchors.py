r"""FLIC's anchor terms over the classes present in a batch, in shapes fixed by the number of classes.

Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, eq. 3: a client's
loss on a batch :math:`B` sums, over the classes :math:`P(B)` of the batch, the :math:`W_2^2` between each anchor
:math:`\mathcal{N}(v_c, L_c L_c^\top)` and the embedded class-conditional, and the cross-entropy of the classifier on
samples of the anchor. Here :math:`P(B)` is a presence mask over all :math:`C` classes (the classes with a positive
count) rather than the sorted ``unique`` labels, and a zero-padded batch says which of its rows are real, so that
every shape is known before the data: the same functions serve one client and, under ``torch.func.vmap``, a stack of
clients whose batches hold different classes and sizes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet.functional.gaussian import gaussian_w2_sq


def gaussian_samples(means: Tensor, factors: Tensor | None, noise: Tensor, scale: float = 1.0) -> Tensor:
    r"""Draws :math:`v + L \xi` of Gaussians :math:`\mathcal{N}(v, L L^\top)` from standard normal ``noise``.

    Args:
        means: :math:`v`, shape ``(..., k)``, broadcast against ``noise``.
        factors: :math:`L`, shape ``(..., k, k)``; ``None`` for :math:`L = \text{scale} \cdot I`.
        noise: :math:`\xi \sim \mathcal{N}(0, I)`, shape ``(..., k)``.
        scale: the standard deviation of every coordinate when ``factors`` is ``None``.

    Returns:
        the draws, of the broadcast shape of ``means`` and ``noise``.

    Example:
        >>> gaussian_samples(torch.ones(2, 3), None, torch.ones(4, 2, 3), scale=2.0).shape
        torch.Size([4, 2, 3])

    """
    if factors is None:
        return means + scale * noise
    return means + (factors @ noise.unsqueeze(-1)).squeeze(-1)


def present_w2_sq(
    anchor_means: Tensor, anchor_factors: Tensor | None, counts: Tensor, class_means: Tensor, class_covs: Tensor
) -> Tensor:
    r""":math:`\sum_{c: n_c > 0} W_2^2(\mathcal{N}(v_c, L_c L_c^\top), \mathcal{N}(\hat m_c, \hat S_c))` (eq. 3).

    Args:
        anchor_means: :math:`v_c`, shape ``(C, k)``.
        anchor_factors: :math:`L_c`, shape ``(C, k, k)``, or ``None`` for identity covariances.
        counts: :math:`n_c`, the batch's count of each class, shape ``(C,)`` (from
            :func:`~fedhet.functional.class_moments`).
        class_means: :math:`\hat m_c`, shape ``(C, k)``.
        class_covs: :math:`\hat S_c`, shape ``(C, k, k)``.

    Returns:
        a scalar; absent classes add exact zeros and pass no gradient.

    """
    w2 = gaussian_w2_sq(anchor_means, anchor_factors, class_means, class_covs)
    return torch.where(counts > 0, w2, torch.zeros_like(w2)).sum(-1)


def anchor_sample_ce(logits: Tensor, present: Tensor, sample_mask: Tensor) -> Tensor:
    r"""The cross-entropy on anchor samples, :math:`\sum_{c \in P(B)} \frac{1}{J} \sum_{j} \mathrm{CE}(g(Z_c^j), c)`.

    Args:
        logits: :math:`g(Z_c^j)`, shape ``(J, C, C)``: for draw ``j`` of the anchor of class ``c``, the ``C`` logits.
        present: :math:`P(B)` as a mask, boolean of shape ``(C,)``.
        sample_mask: which of the ``J`` draws count, boolean of shape ``(J,)`` (padding of a short batch left out).

    Returns:
        a scalar.

    """
    draws, classes = logits.shape[:2]
    targets = torch.arange(classes, device=logits.device).expand(draws, classes)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").unflatten(0, (draws, classes))
    per_class = torch.where(sample_mask.unsqueeze(-1), ce, torch.zeros_like(ce)).sum(0) / sample_mask.sum()
    return torch.where(present, per_class, torch.zeros_like(per_class)).sum()


def present_classes(labels: Tensor, num_classes: int, mask: Tensor | None = None) -> Tensor:
    """Which of the ``num_classes`` classes the (real rows of the) batch holds: boolean of shape ``(C,)``.

    Args:
        labels: shape ``(N,)``, integers in ``[0, num_classes)``.
        num_classes: :math:`C`.
        mask: which rows count, boolean of shape ``(N,)``; all by default.

    Example:
        >>> present_classes(torch.tensor([2, 0, 1]), 4, torch.tensor([True, True, False])).tolist()
        [True, False, True, False]

    """
    hits = labels.unsqueeze(-1) == torch.arange(num_classes, device=labels.device)
    if mask is not None:
        hits = hits & mask.unsqueeze(-1)
    return hits.any(0)
