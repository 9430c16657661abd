"""Per-client classification metrics with an explicit rule for classes a client's evaluation split lacks.

Global Layers ("Global Layers: Non-IID Tabular Federated Learning", §4, and its reference code) scores
every class of a client's head, one-vs-rest, on raw logits; a class with no positive (or no negative) sample in the
evaluation split gets AUROC 0.5 and AUPRC 0, and balanced accuracy averages recall over the classes that do occur.
These functions implement that rule (``absent="score"``) and the alternative that leaves such classes out
(``absent="skip"``). Pure torch, no Lightning.
"""

from __future__ import annotations

from typing import Literal, cast

import torch
from torch import Tensor

AbsentRule = Literal["score", "skip"]


def binary_auroc(scores: Tensor, positive: Tensor) -> Tensor:
    """Area under the ROC curve of ``scores`` for the boolean labels ``positive``, ties counted one half.

    Computed as the Mann-Whitney statistic with mid-ranks, which equals the trapezoidal area under the ROC curve.

    Args:
        scores: shape ``(N,)``, higher means more likely positive (e.g. a raw logit).
        positive: shape ``(N,)``, ``bool``.

    Returns:
        a 0-dim float64 tensor; ``nan`` when ``positive`` holds only one value.

    Example:
        >>> float(binary_auroc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([False, False, True, True])))
        0.75

    """
    scores, positive = scores.double().flatten(), positive.bool().flatten()
    num_pos = int(positive.sum())
    num_neg = positive.numel() - num_pos
    if num_pos == 0 or num_neg == 0:
        return torch.tensor(float("nan"), dtype=torch.float64)
    values, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    mid_ranks = ends - (counts.double() - 1) / 2  # 1-based average rank of each distinct value
    rank_sum = mid_ranks[inverse][positive].sum()
    return cast(Tensor, (rank_sum - num_pos * (num_pos + 1) / 2) / (num_pos * num_neg))


def binary_auprc(scores: Tensor, positive: Tensor) -> Tensor:
    """Average precision (area under the step precision-recall curve) of ``scores`` for the labels ``positive``.

    ``sum_i (R_i - R_{i-1}) P_i`` over the distinct thresholds in decreasing order, as scikit-learn's
    ``average_precision_score`` and torcheval's ``BinaryAUPRC`` compute it.

    Args:
        scores: shape ``(N,)``.
        positive: shape ``(N,)``, ``bool``.

    Returns:
        a 0-dim float64 tensor; ``nan`` when there is no positive sample.

    Example:
        >>> round(float(binary_auprc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([False, False, True, True]))), 4)
        0.8333

    """
    scores, positive = scores.double().flatten(), positive.bool().flatten()
    num_pos = int(positive.sum())
    if num_pos == 0:
        return torch.tensor(float("nan"), dtype=torch.float64)
    order = torch.argsort(scores, descending=True, stable=True)
    scores, hits = scores[order], positive[order].double()
    true_pos, seen = torch.cumsum(hits, 0), torch.arange(1, len(hits) + 1, dtype=torch.float64)
    last_of_value = torch.ones_like(scores, dtype=torch.bool)
    last_of_value[:-1] = scores[1:] != scores[:-1]  # one point per distinct threshold
    precision, recall = (true_pos / seen)[last_of_value], (true_pos / num_pos)[last_of_value]
    gained = torch.diff(recall, prepend=recall.new_zeros(1))
    return (gained * precision).sum()


def one_vs_rest(
    metric: Literal["auroc", "auprc"], scores: Tensor, target: Tensor, absent: AbsentRule = "score"
) -> Tensor:
    """Macro mean over the head's classes of a one-vs-rest ranking metric.

    Args:
        metric: ``"auroc"`` or ``"auprc"``.
        scores: shape ``(N, C)`` with one column per class; a single column ``(N, 1)`` (or ``(N,)``) is a binary head
            whose column scores class 1 against class 0.
        target: shape ``(N,)``, class indices in ``[0, C)`` (``[0, 2)`` for a binary head); ``-1`` marks a sample
            whose class the head does not have, a negative for every class.
        absent: ``"score"``: a class without positives (or, for AUROC, without negatives) scores 0.5 (AUROC) or 0
            (AUPRC), as the Global Layers reference does; ``"skip"``: such classes are left out of the mean.

    Returns:
        a 0-dim float64 tensor; ``nan`` if ``absent="skip"`` leaves no class.

    Raises:
        ValueError: for an unknown ``metric`` or ``absent`` rule.

    Example:
        >>> scores = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [2.0, 0.0, 0.0]])
        >>> float(one_vs_rest("auroc", scores, torch.tensor([0, 1, 0])))  # class 2 never occurs: scores 0.5
        0.8333333333333334
        >>> float(one_vs_rest("auroc", scores, torch.tensor([0, 1, 0]), absent="skip"))
        1.0

    """
    if metric not in ("auroc", "auprc"):
        raise ValueError(f"`metric` must be 'auroc' or 'auprc', got {metric!r}")
    if absent not in ("score", "skip"):
        raise ValueError(f"`absent` must be 'score' or 'skip', got {absent!r}")
    scores = scores.reshape(len(target), -1)
    fn, fallback = (binary_auroc, 0.5) if metric == "auroc" else (binary_auprc, 0.0)
    if scores.shape[1] == 1:  # binary head: one score for class 1
        columns = [(scores[:, 0], target == 1)]
    else:
        columns = [(scores[:, c], target == c) for c in range(scores.shape[1])]
    values = [fn(column, positive) for column, positive in columns]
    if absent == "score":
        values = [v if not torch.isnan(v) else torch.tensor(fallback, dtype=torch.float64) for v in values]
    kept = [v for v in values if not torch.isnan(v)]
    return torch.stack(kept).mean() if kept else torch.tensor(float("nan"), dtype=torch.float64)


def balanced_accuracy(preds: Tensor, target: Tensor, num_classes: int) -> Tensor:
    """Mean recall over the classes that occur in ``target`` (classes without support are left out).

    This is ``MulticlassAccuracy(average="macro")`` of torcheval and scikit-learn's ``balanced_accuracy_score``
    restricted to the head's classes; samples labelled ``-1`` (a class the head does not have) are ignored.

    Args:
        preds: predicted class indices, shape ``(N,)``.
        target: true class indices in ``[0, num_classes)`` or ``-1``, shape ``(N,)``.
        num_classes: number of classes of the head (2 for a binary head).

    Returns:
        a 0-dim float64 tensor; ``nan`` when no sample has a known class.

    Example:
        >>> round(float(balanced_accuracy(torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 0, 1]), num_classes=3)), 4)
        0.8333

    """
    known = target >= 0
    preds, target = preds[known].long(), target[known].long()
    support = torch.bincount(target, minlength=num_classes).double()
    correct = torch.bincount(target[preds == target], minlength=num_classes).double()
    present = support > 0
    if not bool(present.any()):
        return torch.tensor(float("nan"), dtype=torch.float64)
    return (correct[present] / support[present]).mean()
