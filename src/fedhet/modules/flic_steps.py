r"""Which terms of FLIC's loss a local step has, their sum, and their random draws for the stacked path.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, eq. 3. A step of
a preparation phase has the alignment term alone; a local step has the cross-entropy, the :math:`\lambda_1 W_2^2` term
(not in FLIC-HL's representation phase), the :math:`\lambda_2` cross-entropy on anchor samples, and, when the engine
steps the anchor copy, the copy's objective (:mod:`~fedhet.modules.flic_anchor_rules`). A client alone draws the
terms' random numbers after the embedding's forward pass; a stack of clients (``StackedRunner``) draws the same numbers
as it draws each batch (:meth:`StepTerms.draws`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet.functional.stacking import masked_mean
from fedhet.modules.flic_pretraining import ALIGNMENT_PHASES
from fedhet.modules.flic_terms import AnchorTerms

CLIENT_ATTRIBUTES = ("_upload", "_local_means", "_local_factors", "pretrain_history")
"""What FLIC's hooks set per client and the stacked path keeps per client: the upload, the anchor copy (trained in
stacks by optimizer 2) and the latest preparation phase's losses."""


@dataclass(frozen=True)
class StepTerms:
    r"""The terms of a local step of each phase, and their draws.

    Args:
        terms: the anchor terms (their :meth:`~fedhet.modules.flic_terms.AnchorTerms.draws`).
        lambda_align: :math:`\lambda_1` (0: no alignment term).
        lambda_anchor: :math:`\lambda_2` (0: no cross-entropy on anchor samples).

    """

    terms: AnchorTerms
    lambda_align: float
    lambda_anchor: float

    def aligns(self, phase: str | None) -> bool:
        """Whether a local step of ``phase`` has the alignment term (every phase but FLIC-HL's representation one)."""
        return bool(self.lambda_align) and phase != "representation"

    def loss(
        self,
        phase: str | None,
        classify: Callable[[Tensor], Tensor],
        z: Tensor,
        y: Tensor,
        anchors: tuple[Tensor, Tensor | None],
        mask: Tensor | None,
        noise: Tensor | None,
        align_noise: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        r"""The step's loss without the anchor copy's objective, and its alignment term (``None`` when it has none).

        In a preparation phase the alignment term alone; else the cross-entropy, plus :math:`\lambda_1 W_2^2` where
        :meth:`aligns`, plus :math:`\lambda_2` times the cross-entropy on anchor samples.

        Args:
            phase: the local phase's name (``None``: no phase).
            classify: the classifier, latent vectors ``(n, k)`` to logits ``(n, C)``.
            z: the batch's embeddings ``(B, k)``.
            y: its labels ``(B,)``.
            anchors: the anchor means ``(C, k)`` and factors ``(C, k, k)`` (``None`` for fixed covariances).
            mask: the batch's real rows ``(B,)``; ``None``: all, the anchor terms on the batch's classes only.
            noise: the anchor noise ``(J, C, k)`` (:meth:`draws`); ``None`` draws it here.
            align_noise: the alignment term's draws ``(B, k)``; ``None`` draws them here.

        """
        means, factors = anchors
        if phase in ALIGNMENT_PHASES:
            alignment = self.terms.alignment(z, y, means, factors, mask, None)
            return alignment, alignment
        logits = classify(z)
        if mask is None:
            loss = F.cross_entropy(logits, y)
        else:
            loss = masked_mean(F.cross_entropy(logits, y, reduction="none"), mask)
        align: Tensor | None = None
        if self.aligns(phase):
            align = self.terms.alignment(z, y, means, factors, mask, align_noise)
            loss = loss + self.lambda_align * align
        if self.lambda_anchor:
            loss = loss + self.lambda_anchor * self.terms.classification(classify, y, means, factors, noise, mask)
        return loss, align

    def draws(
        self, batch: Sequence[Tensor], phase: str | None, num_classes: int, dtype: torch.dtype, objective: bool
    ) -> tuple[Tensor, ...]:
        r"""The batch ``(x, y)`` with the draws of its step: ``(x, y, noise, align_noise, objective_noise)``.

        In the order a client alone draws them: with ``anchor_stats="sampled"``, the anchor samples' draws of the
        alignment term (``(B, k)``, when the step has that term), then the anchor noise ``(J, C, k)``
        (:meth:`AnchorTerms.noise <fedhet.modules.flic_terms.AnchorTerms.noise>`, with the :math:`\lambda_2` term),
        then the anchor samples' draws of the anchor copy's objective (``(B, k)``, when ``objective``: the engine steps
        the copy). A term's draws are empty (nothing drawn) where the step has no such term or draws nothing for it
        (closed-form statistics), and all are in a preparation phase. The stacked path draws them as it draws each
        batch; a client alone draws the same numbers from the global generator after the embedding's forward pass,
        where the stacked path refuses embeddings that draw random numbers (dropout), so both take the same numbers.

        Args:
            batch: ``(x, y)``, labels ``y`` of shape ``(B,)``.
            phase: the local phase's name (``None``: no phase, a plain Trainer's step).
            num_classes: :math:`C`.
            dtype: the anchors' dtype.
            objective: whether the step has the anchor copy's objective.

        """
        x, y = batch[0], batch[1]
        steps = phase not in ALIGNMENT_PHASES
        align, classification = steps and self.aligns(phase), steps and bool(self.lambda_anchor)
        noise, align_noise, objective_noise = self.terms.draws(
            y, num_classes, dtype, align=align, classification=classification, objective=steps and objective
        )
        return x, y, noise, align_noise, objective_noise
