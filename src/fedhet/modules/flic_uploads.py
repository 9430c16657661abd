r"""What a FLIC client uploads after local training: its version of the anchors, named by FLIC's wire names.

A. Rakotomamonjy et al., "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024. The server
averages the uploads (:class:`~fedhet.callbacks.AnchorUpdate`); :func:`~fedhet.callbacks.flic.flic_upload` declares
them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedhet.callbacks.flic import ANCHOR_COUNTS, ANCHOR_FACTORS, ANCHOR_MEANS


def anchor_upload(
    means: Tensor, factors: Tensor | None, y: Tensor, num_classes: int, holders_only: bool
) -> dict[str, Tensor]:
    """The client's anchors, by wire name.

    Args:
        means: the client's anchor means, shape ``(C, k)``.
        factors: its anchor factors ``(C, k, k)`` (learned covariances), or ``None``.
        y: the labels of its training set, shape ``(N,)``.
        num_classes: :math:`C`.
        holders_only: also upload the class counts ``(C,)`` (the server averages each class over its holders).

    Returns:
        ``flic/anchor_means``, with ``flic/anchor_factors`` (a copy) when learned and ``flic/anchor_counts`` with
        ``holders_only``.

    """
    upload = {ANCHOR_MEANS: means}
    if factors is not None:
        upload[ANCHOR_FACTORS] = factors.detach().clone()
    if holders_only:
        upload[ANCHOR_COUNTS] = torch.bincount(y, minlength=num_classes).float()
    return upload
