"""The proximal penalty that ties a client's parameters to the server's (FedProx, HyFEM)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor


def proximal_penalty(params: Iterable[Tensor], anchors: Iterable[Tensor]) -> Tensor:
    r""":math:`\frac12 \sum_i \|\theta_i - a_i\|^2`, whose gradient in :math:`\theta_i` is :math:`\theta_i - a_i`.

    The proximal term of FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020) and
    HyFEM's regularisers :math:`r_{m,1}, r_{m,2}` (Zhang et al., TMLR 2024, eqs. 4-5). Anchors get no gradient.

    Args:
        params: tensors of any shapes.
        anchors: one tensor per parameter, same shape.

    Returns:
        a scalar tensor (0 when there are no parameters).

    Example:
        >>> proximal_penalty([torch.tensor([1.0, 3.0])], [torch.tensor([0.0, 1.0])]).item()
        2.5

    """
    terms = [(p - a.detach()).pow(2).sum() for p, a in zip(params, anchors, strict=True)]
    return 0.5 * torch.stack(terms).sum() if terms else torch.zeros(())
