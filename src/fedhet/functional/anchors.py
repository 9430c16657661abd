r"""FLIC's anchor terms over the classes present in a batch, for one client or for a stack of clients.

Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, eq. 3: a client's
loss on a batch :math:`B` sums, over the classes :math:`P(B)` of the batch, the :math:`W_2^2` between each anchor
:math:`\mathcal{N}(v_c, L_c L_c^\top)` and the embedded class-conditional, and the cross-entropy of the classifier on
samples of the anchor. The terms take the classes to evaluate (:func:`evaluated_classes`) and a presence mask over
them: one client's batch of real rows evaluates its own classes only (the sorted ``unique`` labels, so absent classes
cost nothing); a stack of clients under ``torch.func.vmap``, whose batches hold different classes and sizes and
are zero-padded, evaluates all :math:`C` classes and masks the absent ones, so that every shape is known before the
data. The same functions compute both. Also here: the anchors' seeded start (:func:`initial_anchors`) and how far a
client's update moves them (:func:`anchor_move`).
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet.functional.gaussian import class_moments, gaussian_w2_sq


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
    anchor_means: Tensor, anchor_factors: Tensor | None, counts: Tensor | None, class_means: Tensor, class_covs: Tensor
) -> Tensor:
    r""":math:`\sum_{c: n_c > 0} W_2^2(\mathcal{N}(v_c, L_c L_c^\top), \mathcal{N}(\hat m_c, \hat S_c))` (eq. 3).

    Every argument holds the :math:`P` evaluated classes (:func:`evaluated_classes`) on its first axis, so that only
    those classes' eigendecompositions are computed.

    Args:
        anchor_means: :math:`v_c`, shape ``(P, k)``.
        anchor_factors: :math:`L_c`, shape ``(P, k, k)``, or ``None`` for identity covariances.
        counts: :math:`n_c`, the batch's count of each class, shape ``(P,)`` (from
            :func:`~fedhet.functional.class_moments`); ``None`` when every evaluated class is in the batch.
        class_means: :math:`\hat m_c`, shape ``(P, k)``.
        class_covs: :math:`\hat S_c`, shape ``(P, k, k)``.

    Returns:
        a scalar; absent classes add exact zeros and pass no gradient.

    """
    w2 = gaussian_w2_sq(anchor_means, anchor_factors, class_means, class_covs)
    if counts is None:  # the batch's own classes: nothing to mask (and no masking to differentiate)
        return w2.sum(-1)
    return torch.where(counts > 0, w2, torch.zeros_like(w2)).sum(-1)


def anchor_sample_ce(
    logits: Tensor, classes: Tensor, present: Tensor | None = None, sample_mask: Tensor | None = None
) -> Tensor:
    r"""The cross-entropy on anchor samples, :math:`\sum_{c \in P(B)} \frac{1}{J} \sum_{j} \mathrm{CE}(g(Z_c^j), c)`.

    Args:
        logits: :math:`g(Z_c^j)`, shape ``(J, P, C)``: for draw ``j`` of the anchor of evaluated class ``classes[p]``,
            the ``C`` logits.
        classes: the :math:`P` evaluated classes (:func:`evaluated_classes`), the draws' targets, shape ``(P,)``.
        present: which of them are in :math:`P(B)`, boolean of shape ``(P,)``; ``None`` for all.
        sample_mask: which of the ``J`` draws count, boolean of shape ``(J,)`` (padding of a short batch left out);
            ``None`` for all.

    Returns:
        a scalar.

    """
    targets = classes.expand(logits.shape[0], -1)
    if present is None and sample_mask is None:  # one mean over the J * P draws, times P: the sum of class means
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()) * len(classes)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").unflatten(0, targets.shape)
    if sample_mask is not None:
        per_class = torch.where(sample_mask.unsqueeze(-1), ce, torch.zeros_like(ce)).sum(0) / sample_mask.sum()
    else:
        per_class = ce.mean(0)
    if present is None:
        return per_class.sum()
    return torch.where(present, per_class, torch.zeros_like(per_class)).sum()


def evaluated_classes(labels: Tensor, num_classes: int, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The classes whose anchor terms a batch's step computes, sorted, and each row's position among them.

    A batch of real rows only (``mask=None``) evaluates its own classes (the ``unique`` labels: a shape that depends
    on the data, so outside ``torch.func.vmap``); a zero-padded batch (``mask`` given, e.g. under ``vmap``) evaluates
    all ``num_classes``, its absent ones masked out by the terms (:func:`present_classes`). The positions index the
    rows' moments directly (``class_moments(z, positions, P)``), so only the evaluated classes' are computed.

    Args:
        labels: shape ``(N,)``, integers in ``[0, num_classes)``.
        num_classes: :math:`C`.
        mask: which rows are real, boolean of shape ``(N,)``; ``None`` when all are.

    Returns:
        ``(classes, positions)`` of shapes ``(P,)`` and ``(N,)``, ``classes[positions] == labels``.

    Example:
        >>> classes, positions = evaluated_classes(torch.tensor([2, 0, 2]), 4)
        >>> classes.tolist(), positions.tolist()
        ([0, 2], [1, 0, 1])
        >>> evaluated_classes(torch.tensor([2, 0, 2]), 4, torch.tensor([True, True, False]))[0].tolist()
        [0, 1, 2, 3]

    """
    if mask is None:
        return cast(tuple[Tensor, Tensor], torch.unique(labels, return_inverse=True))
    return torch.arange(num_classes, device=labels.device), labels


def group_draws(draws: Tensor, num_groups: int) -> Tensor:
    """Draws made group by group, ``(P * J, k)``, as ``(J, P, k)``: row ``p * J + j`` goes to ``[j, p]`` (a view).

    Example:
        >>> group_draws(torch.arange(4.0).unsqueeze(-1), 2).squeeze(-1).tolist()
        [[0.0, 2.0], [1.0, 3.0]]

    """
    return cast(Tensor, draws.unflatten(0, (num_groups, -1)).transpose(0, 1))


def draws_by_class(draws: Tensor, classes: Tensor, num_classes: int) -> Tensor:
    r"""Draws made class by class, ``(P * J, k)``, laid out as ``(J, C, k)``: ``J`` for each class, zeros elsewhere.

    Row ``p * J + j`` of ``draws`` (draw ``j`` of class ``classes[p]``, the order of
    ``classes.repeat_interleave(J)``) goes to ``[j, classes[p]]``.

    Args:
        draws: shape ``(P * J, k)``, grouped class by class.
        classes: the :math:`P` distinct classes drawn for, shape ``(P,)``.
        num_classes: :math:`C`.

    Returns:
        shape ``(J, C, k)``.

    Example:
        >>> draws_by_class(torch.arange(4.0).unsqueeze(-1), torch.tensor([0, 2]), 3).squeeze(-1).tolist()
        [[0.0, 0.0, 2.0], [1.0, 0.0, 3.0]]

    """
    per_class = group_draws(draws, len(classes))
    placed = draws.new_zeros(per_class.shape[0], num_classes, draws.shape[-1])
    placed[:, classes] = per_class
    return placed


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


def initial_anchors(
    num_classes: int, dim: int, std: float, variance: float, seed: int, factors: bool = False
) -> tuple[Tensor, Tensor | None]:
    r"""The anchors' start, the same on every client: means :math:`v_c \sim \mathcal{N}(0, \text{std}^2 I)`.

    Args:
        num_classes: :math:`C`.
        dim: :math:`k`, the latent dimension.
        std: the standard deviation of the means' coordinates.
        variance: the anchors' covariance is ``variance`` times the identity.
        seed: the seed of the means' draw (a generator of its own; the global one is untouched).
        factors: also return the Cholesky factors :math:`\sqrt{\text{variance}} I` (learned covariances).

    Returns:
        the means ``(C, k)`` and the factors ``(C, k, k)``, or ``None`` without ``factors``.

    Example:
        >>> means, factors = initial_anchors(3, 2, std=10.0, variance=4.0, seed=0, factors=True)
        >>> means.shape, factors[0].tolist()
        (torch.Size([3, 2]), [[2.0, 0.0], [0.0, 2.0]])

    """
    generator = torch.Generator().manual_seed(seed)
    means = std * torch.randn(num_classes, dim, generator=generator)
    if not factors:
        return means, None
    return means, (math.sqrt(variance) * torch.eye(dim).expand(num_classes, -1, -1)).clone()


def anchor_move(start: Tensor, end: Tensor, z: Tensor, y: Tensor) -> float:
    r"""How far an update moved anchor means, relative to their distance to the embedded class means.

    :math:`\frac{1}{|P|} \sum_{c \in P} \|v'_c - v_c\| / \|v_c - \hat m_c\|` over the classes :math:`P` present in
    ``y``, with :math:`\hat m_c` the mean of the embeddings of class :math:`c` (the denominator floored at the dtype's
    smallest positive number).

    Args:
        start: the means before the update :math:`v`, shape ``(C, k)``.
        end: the means after it :math:`v'`, shape ``(C, k)``.
        z: the client's embeddings, shape ``(N, k)``.
        y: their labels, shape ``(N,)``.

    Example:
        >>> anchor_move(torch.zeros(2, 1), torch.ones(2, 1), torch.tensor([[4.0]]), torch.tensor([1]))
        0.25

    """
    counts, class_means, _ = class_moments(z, y, len(start))
    held = counts > 0
    before = start[held]
    distance = (before - class_means[held]).norm(dim=-1).clamp_min(torch.finfo(before.dtype).tiny)
    return float(((end[held] - before).norm(dim=-1) / distance).mean())
