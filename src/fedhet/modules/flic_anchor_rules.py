r"""FLIC's two rules for a client's anchor update: the reference code's per-batch copy, the paper's one step.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024. The client
updates the received anchors :math:`\mu_c = \mathcal{N}(v_c, L_c L_c^\top)` and uploads its version; the server
averages them (:class:`~fedhet.callbacks.AnchorUpdate`).

* :class:`CodeAnchorRule` (``anchor_update="code"``, the default, as the reference code does): during local training,
  after every batch, one Adam step (``anchor_lr``) on a local copy of the anchor means, on the cross-entropy of the
  classifier on the :math:`C` means plus the :math:`W_2^2` to the batch's classes, both of weight 1 (and the factors on
  the :math:`W_2^2` term when covariances are learned); the copy is uploaded.
* :class:`PaperAnchorRule` (``anchor_update="paper"``, Alg. S2, steps 17-22): one gradient step from the received
  anchors after training, :math:`\eta` = ``anchor_lr``, on :math:`\lambda_1 \|v_c - \hat m_c\|^2` (plus
  :math:`\lambda_1 B^2` with learned covariances) and the :math:`\lambda_2` term, for the client's classes, with the
  class moments of its whole training set. With the paper's :math:`\eta = \lambda_1 = 10^{-3}` an anchor moves by
  :math:`2\eta\lambda_1 = 2 \cdot 10^{-6}` of its distance to the class mean per round (measured: 2e-6 per round
  against 3e-3 to 5e-3 with the code's rule on the linear-mapping toy; :attr:`~fedhet.modules.FLIC.anchor_move`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet.functional.gaussian import bures_sq, class_moments
from fedhet.modules.flic_terms import AnchorTerms


def lower_triangular(factors: Tensor) -> Tensor:
    """Anchor factors ``(C, k, k)`` in Cholesky form: the lower triangle, columns signed for a positive diagonal."""
    factors = factors.detach().tril()
    signs = torch.where(factors.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0)
    return factors * signs.unsqueeze(-2)


@dataclass
class AnchorCopy:
    """A client's local copy of the received anchors (means ``(C, k)``, factors ``(C, k, k)`` or ``None``) and Adam.

    The module holds the copy's tensors as its attributes while it trains (a stack of clients trains them under
    ``vmap``, one per client); the optimizer steps them.
    """

    means: Tensor
    factors: Tensor | None
    optimizer: torch.optim.Optimizer


@dataclass(frozen=True)
class CodeAnchorRule:
    """The reference code's per-batch Adam steps on a local copy of the anchors (see the module's docstring).

    Args:
        terms: the anchor terms (the copy's objective uses their :math:`W_2^2`).
        lr: Adam's learning rate (``anchor_lr``).

    """

    terms: AnchorTerms
    lr: float

    def copy(self, means: Tensor, factors: Tensor | None) -> AnchorCopy:
        """A fresh local copy of the received anchors (means, and factors when learned) and its Adam."""
        local_means = means.detach().clone().requires_grad_(True)
        local_factors = None if factors is None else factors.detach().clone().requires_grad_(True)
        local = [local_means] + ([] if local_factors is None else [local_factors])
        return AnchorCopy(local_means, local_factors, torch.optim.Adam(local, lr=self.lr))

    def objective(
        self,
        frozen_classify: Callable[[Tensor], Tensor],
        z: Tensor,
        y: Tensor,
        means: Tensor,
        factors: Tensor | None,
        mask: Tensor | None = None,
        noise: Tensor | None = None,
    ) -> Tensor:
        r"""The reference code's anchor loss: CE of the classifier on the C means plus :math:`W_2^2` to the batch.

        Args:
            frozen_classify: the classifier with its weights held fixed (detached), so that the loss's gradient
                reaches the anchors only: latent vectors ``(C, k)`` to logits ``(C, C)``.
            z: the batch's embeddings ``(B, k)`` (detached).
            y: its labels ``(B,)``.
            means: the local anchor means ``(C, k)``.
            factors: the local anchor factors ``(C, k, k)``, or ``None`` for fixed covariances.
            mask: the batch's real rows ``(B,)``; all by default.
            noise: the anchor samples' draws ``(B, k)`` with ``stats="sampled"``; ``None`` draws them here.

        """
        logits = frozen_classify(means)
        targets = torch.arange(len(means), device=means.device)
        return F.cross_entropy(logits, targets) + self.terms.alignment(z, y, means, factors, mask, noise)

    def step(self, copy: AnchorCopy, frozen_classify: Callable[[Tensor], Tensor], z: Tensor, y: Tensor) -> None:
        """One step of the copy on :meth:`objective`, taken by the module itself (no engine steps the copy).

        With learned covariances the local factors take the same Adam step on the :math:`W_2^2` term.
        """
        local = [copy.means] if copy.factors is None else [copy.means, copy.factors]
        with torch.enable_grad():
            grads = torch.autograd.grad(self.objective(frozen_classify, z, y, copy.means, copy.factors), local)
        for tensor, grad in zip(local, grads, strict=True):
            tensor.grad = grad
        copy.optimizer.step()
        copy.optimizer.zero_grad(set_to_none=True)

    @staticmethod
    def result(means: Tensor, factors: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """What the client uploads of its trained copy: the means, and the factors in Cholesky form."""
        return means.detach().clone(), None if factors is None else lower_triangular(factors)


@dataclass(frozen=True)
class PaperAnchorRule:
    r"""The paper's one gradient step from the received anchors after local training (see the module's docstring).

    Args:
        terms: the anchor terms (the :math:`\lambda_2` term's anchor samples).
        lr: :math:`\eta` (``anchor_lr``).
        lambda_align: :math:`\lambda_1`.
        lambda_anchor: :math:`\lambda_2`.

    """

    terms: AnchorTerms
    lr: float
    lambda_align: float
    lambda_anchor: float

    def step(
        self, classify: Callable[[Tensor], Tensor], anchors: Tensor, factors: Tensor | None, z: Tensor, y: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """One gradient step from the received anchors on the client's classes (paper Alg. S2, steps 17-22).

        Args:
            classify: the client's classifier, latent vectors ``(n, k)`` to logits ``(n, C)``.
            anchors: the received anchor means ``(C, k)``.
            factors: their factors ``(C, k, k)``, or ``None`` for fixed covariances.
            z: the client's embedded training set, shape ``(N, k)``.
            y: its labels, shape ``(N,)``.

        Returns:
            the client's anchor means ``(C, k)`` and, with learned covariances, factors ``(C, k, k)``.

        """
        counts, class_means, class_covs = class_moments(z, y, len(anchors))
        present = counts > 0
        means = anchors.detach().clone().requires_grad_(True)
        factors = factors.detach().clone().requires_grad_(True) if factors is not None else None
        with torch.enable_grad():
            loss = self.lambda_align * (means[present] - class_means[present]).pow(2).sum()
            if factors is not None:
                loss = loss + self.lambda_align * bures_sq(factors[present], class_covs[present]).sum()
            if self.lambda_anchor:
                classes = present.nonzero().squeeze(1)
                per_class = self.terms.samples or len(y)
                labels = classes.repeat_interleave(per_class)
                draws = self.terms.sample(labels, means, factors)
                loss = loss + self.lambda_anchor * F.cross_entropy(classify(draws), labels) * len(classes)
            inputs = [means] if factors is None else [means, factors]
            grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        new_means = (means - self.lr * grads[0]).detach()
        if factors is None:
            return new_means, None
        return new_means, lower_triangular(factors - self.lr * grads[1])
