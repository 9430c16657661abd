r"""FLIC's anchor terms on a batch: the :math:`W_2^2` alignment to the anchors, the anchor-sample cross-entropy, draws.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, eq. 3 and
Alg. S2. :class:`AnchorTerms` holds the options that shape the terms (the latent width :math:`k`, the anchors' fixed
variance, closed-form or sampled statistics, :math:`J`) and computes them from tensors it is given: the embeddings,
the anchors :math:`\mu_c = \mathcal{N}(v_c, L_c L_c^\top)` (means ``(C, k)``, factors ``(C, k, k)`` or ``None``)
and, for the classification term, the classifier. :class:`~fedhet.modules.FLIC` composes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from fedhet.functional.anchors import (
    anchor_sample_ce,
    draws_by_class,
    evaluated_classes,
    gaussian_samples,
    group_draws,
    present_classes,
    present_w2_sq,
)
from fedhet.functional.gaussian import class_moments, psd_sqrt


@dataclass(frozen=True)
class AnchorTerms:
    """The anchor terms of FLIC's loss.

    Args:
        latent_dim: :math:`k`, the latent space's width.
        variance: the anchors' covariance is this times the identity when their factors are not learned.
        stats: ``"closed_form"`` (exact anchor parameters, the paper) or ``"sampled"`` (both Gaussians estimated
            from samples, the reference code).
        samples: :math:`J`, anchor samples per class of the batch; ``None`` for the batch size (the code).

    """

    latent_dim: int
    variance: float = 1.0
    stats: Literal["closed_form", "sampled"] = "closed_form"
    samples: int | None = None

    def sample(self, labels: Tensor, means: Tensor, factors: Tensor | None, noise: Tensor | None = None) -> Tensor:
        r"""One draw :math:`v_c + L_c \xi` per label, shape ``(len(labels), k)``.

        Args:
            labels: classes, shape ``(n,)``.
            means: anchor means :math:`v`, shape ``(C, k)``.
            factors: :math:`L`, shape ``(C, k, k)``; ``None`` for ``variance`` times the identity.
            noise: :math:`\xi`, shape ``(n, k)``; ``None`` to draw it here (one ``torch.randn``).

        """
        if noise is None:
            noise = torch.randn(len(labels), self.latent_dim, device=means.device, dtype=means.dtype)
        chosen = None if factors is None else factors[labels]
        return gaussian_samples(means[labels], chosen, noise, math.sqrt(self.variance))

    def alignment(
        self,
        z: Tensor,
        y: Tensor,
        means: Tensor,
        factors: Tensor | None,
        mask: Tensor | None = None,
        noise: Tensor | None = None,
    ) -> Tensor:
        r""":math:`\sum_{c \in P(B)} W_2^2(\mu_c, \mathcal{N}(\hat m_c, \hat S_c))` for embeddings ``z`` ``(B, k)``.

        Without ``mask`` every row is real and only the batch's classes are evaluated; ``mask`` (``(B,)``, the real
        rows of a padded batch, under ``torch.func.vmap``) evaluates all :math:`C` classes over a presence mask
        (:func:`~fedhet.functional.evaluated_classes`). With ``stats="sampled"``, ``noise`` (``(B, k)``) gives the
        anchor samples' standard normal draws, one per row; ``None`` draws them here.
        """
        classes, positions = evaluated_classes(y, len(means), mask)
        counts, class_means, class_covs = class_moments(z, positions, len(classes), mask)
        present_counts = None if mask is None else counts  # a batch's own classes are all present
        if self.stats == "sampled":  # both Gaussians estimated from samples (the reference code)
            draws = self.sample(y, means, factors, noise)
            _, anchor_means, anchor_covs = class_moments(draws, positions, len(classes), mask)
            anchor_factors = psd_sqrt(anchor_covs.detach())
            return present_w2_sq(anchor_means, anchor_factors, present_counts, class_means, class_covs)
        if factors is not None:
            factors = factors[classes]
        elif self.variance != 1.0:
            eye = torch.eye(self.latent_dim, device=z.device)
            factors = math.sqrt(self.variance) * eye.expand(len(classes), -1, -1)
        return present_w2_sq(means[classes], factors, present_counts, class_means, class_covs)

    def classification(
        self,
        classify: Callable[[Tensor], Tensor],
        y: Tensor,
        means: Tensor,
        factors: Tensor | None,
        noise: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        r""":math:`\sum_{c \in P(B)} \frac{1}{J} \sum_j \mathrm{CE}(g(Z_c^j), c)`, :math:`Z_c^j = v_c + L_c \xi_j`.

        Evaluated on the batch's classes only, or, with ``mask``, on all :math:`C` over a presence mask (as
        :meth:`alignment`).

        Args:
            classify: :math:`g`, latent vectors ``(n, k)`` to class logits ``(n, C)``.
            y: the batch's labels ``(B,)``.
            means: the anchor means ``(C, k)``.
            factors: their factors ``(C, k, k)``, or ``None``.
            noise: :math:`\xi`, shape ``(J, C, k)`` (:meth:`noise`); ``None`` to draw it here.
            mask: the batch's real rows ``(B,)``; with ``samples=None`` (:math:`J = B`) it also says which draws
                count.

        """
        num_classes = len(means)
        classes, _ = evaluated_classes(y, num_classes, mask)
        present = None if mask is None else present_classes(y, num_classes, mask)
        # a client alone draws its classes' noise now, straight in its (J, P, k) layout; a stack gathers it
        if noise is None:
            noise = group_draws(self.class_draws(classes, len(y), means.dtype), len(classes))
        else:
            noise = noise[:, classes]
        factors = None if factors is None else factors[classes]
        draws = gaussian_samples(means[classes], factors, noise, math.sqrt(self.variance))
        logits = classify(draws.flatten(0, 1)).unflatten(0, draws.shape[:2])
        counted = mask if self.samples is None else None  # J = B: the batch's real rows are its real draws
        return anchor_sample_ce(logits, classes, present, counted)

    def noise(self, y: Tensor, num_classes: int, dtype: torch.dtype) -> Tensor:
        r""":math:`\xi`, shape ``(J, C, k)``: :math:`J` standard normal draws for each class of the batch, else zeros.

        :math:`J` is ``samples``, or the batch's size (the code). The draws are those of a client's step
        (:meth:`class_draws`), placed by class (:func:`~fedhet.functional.draws_by_class`).
        """
        classes = torch.unique(y)
        return draws_by_class(self.class_draws(classes, len(y), dtype), classes, num_classes)

    def class_draws(self, classes: Tensor, batch_size: int, dtype: torch.dtype) -> Tensor:
        """The draws of a step for the :math:`P` ``classes`` (increasing), class by class: ``(P * J, k)``.

        One ``torch.randn`` (global generator, the classes' device); :math:`J` is ``samples`` or the batch's size.
        """
        shape = (len(classes) * (self.samples or batch_size), self.latent_dim)
        return torch.randn(shape, device=classes.device, dtype=dtype)

    def draws(
        self, y: Tensor, num_classes: int, dtype: torch.dtype, *, align: bool, classification: bool, objective: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        r"""A step's draws, in the order a client alone makes them: ``(noise, align_noise, objective_noise)``.

        With ``stats="sampled"``, the anchor samples of the alignment term (``(B, k)``, when ``align``), then the
        classification term's :meth:`noise` ``(J, C, k)`` (when ``classification``), then the anchor samples of the
        anchor copy's objective (``(B, k)``, when ``objective``). A term's draws are empty where it draws nothing.
        """
        none = torch.zeros(0, self.latent_dim, device=y.device, dtype=dtype)
        noise = torch.zeros(0, num_classes, self.latent_dim, device=y.device, dtype=dtype)
        sampled = self.stats == "sampled"
        align_noise = none
        if sampled and align:
            align_noise = torch.randn(len(y), self.latent_dim, device=y.device, dtype=dtype)
        if classification:
            noise = self.noise(y, num_classes, dtype)
        objective_noise = none
        if sampled and objective:
            objective_noise = torch.randn(len(y), self.latent_dim, device=y.device, dtype=dtype)
        return noise, align_noise, objective_noise
