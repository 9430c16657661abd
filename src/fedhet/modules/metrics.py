"""Per-client classification metrics over a whole evaluation split (torchmetrics), e.g. Global Layers' tabular scores.

The maths (one-vs-rest AUROC / AUPRC, balanced accuracy) is in :mod:`fedhet.functional.tabular_metrics`; this is
the stateful :class:`torchmetrics.Metric` that keeps a split's scores and targets and scores them once.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor
from torchmetrics import Metric

from fedhet.functional.tabular_metrics import AbsentRule, balanced_accuracy, one_vs_rest


class ClientMetric(Metric):
    """One per-client classification metric over every evaluated sample (scores and targets are kept, then scored).

    Args:
        kind: ``"auroc"``, ``"auprc"`` (one-vs-rest macro; a binary head scores class 1), ``"balanced_accuracy"`` or
            ``"accuracy"``.
        num_classes: classes of the head (2 for a binary head with one logit).
        absent: what ``"auroc"``/``"auprc"`` do with a class the split lacks (see
            :func:`fedhet.functional.tabular_metrics.one_vs_rest`).
        threshold: a binary head predicts class 1 where its logit is at least this.

    """

    higher_is_better = True
    full_state_update = False
    plot_lower_bound = 0.0  # every kind is a rate in [0, 1] (a deployed server refuses a node's value outside it)
    plot_upper_bound = 1.0

    scores: list[Tensor]  # metric states (add_state)
    target: list[Tensor]

    def __init__(
        self,
        kind: Literal["auroc", "auprc", "balanced_accuracy", "accuracy"],
        num_classes: int,
        absent: AbsentRule = "score",
        threshold: float = 0.5,
    ) -> None:
        super().__init__(sync_on_compute=False)
        self.kind, self.num_classes, self.absent, self.threshold = kind, num_classes, absent, threshold
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, scores: Tensor, target: Tensor) -> None:
        """Add a batch: ``scores`` ``(B, C)`` logits (``(B, 1)`` binary), ``target`` ``(B,)`` head indices or -1."""
        self.scores.append(scores.detach().float())
        self.target.append(target.detach().long())

    def compute(self) -> Tensor:
        """The metric over every sample seen since the last reset (``nan`` when none)."""
        if not self.scores:
            return torch.tensor(float("nan"))
        scores, target = torch.cat(self.scores), torch.cat(self.target)
        if self.kind in ("auroc", "auprc"):
            return one_vs_rest(self.kind, scores, target, self.absent).float()
        preds = (scores[:, 0] >= self.threshold).long() if scores.shape[1] == 1 else scores.argmax(dim=1)
        if self.kind == "balanced_accuracy":
            return balanced_accuracy(preds, target, self.num_classes).float()
        return (preds == target).float().mean()
