r"""Covariance features of multichannel signals: shrunk trial covariances and their log-Euclidean tangent vectors.

The standard BCI pipeline that FLIC's BCI experiment uses (Rakotomamonjy et al., TMLR 2024, appendix S3.2; Barachant
et al., "Multiclass brain-computer interface classification by Riemannian geometry", IEEE TBME 2012): one covariance
matrix per trial over the channels, mapped to a vector of the tangent space, of dimension :math:`c(c+1)/2` for
:math:`c` channels. Here the tangent space is taken at the identity (the matrix logarithm), so that nothing is fitted on
the data.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def trial_covariances(signals: Tensor, shrinkage: float = 0.1) -> Tensor:
    r"""Per-trial channel covariances shrunk towards a scaled identity.

    :math:`(1-\gamma) S + \gamma \frac{\operatorname{Tr} S}{c} I` with :math:`S` the unbiased sample covariance.

    Args:
        signals: trials of shape ``(N, c, T)`` (channels by time steps; ``T >= 2``).
        shrinkage: :math:`\gamma \in [0, 1]`; positive keeps short trials (``T <= c``) positive definite.

    Returns:
        shape ``(N, c, c)``, symmetric positive (semi-)definite.

    Example:
        >>> trial_covariances(torch.randn(4, 3, 50)).shape
        torch.Size([4, 3, 3])

    """
    if signals.ndim != 3 or signals.shape[-1] < 2:
        raise ValueError(f"trial_covariances: signals must be (N, c, T) with T >= 2, got {tuple(signals.shape)}")
    if not 0.0 <= shrinkage <= 1.0:
        raise ValueError(f"trial_covariances: shrinkage must be in [0, 1], got {shrinkage}")
    centred = signals - signals.mean(-1, keepdim=True)
    sample = centred @ centred.mT / (signals.shape[-1] - 1)
    channels = signals.shape[1]
    target = sample.diagonal(dim1=-2, dim2=-1).mean(-1)[:, None, None] * torch.eye(channels, dtype=signals.dtype)
    return (1 - shrinkage) * sample + shrinkage * target


def tangent_vectors(spd: Tensor, eps: float = 1e-10) -> Tensor:
    r"""Log-Euclidean tangent vectors at the identity.

    The upper triangle of :math:`\log \Sigma`, off-diagonals times :math:`\sqrt 2` (so that Euclidean norms of the
    vectors equal Frobenius norms of the logarithms).

    Args:
        spd: symmetric positive definite matrices, shape ``(N, c, c)``.
        eps: eigenvalues are clamped to at least this before the logarithm.

    Returns:
        shape ``(N, c (c + 1) / 2)``, in the input dtype.

    Example:
        >>> v = tangent_vectors(torch.diag(torch.tensor([1.0, 2.0])).unsqueeze(0))
        >>> [round(x, 4) for x in v[0].tolist()]
        [0.0, 0.0, 0.6931]

    """
    values, vectors = torch.linalg.eigh(spd.double())
    log: Tensor = (vectors * values.clamp_min(eps).log().unsqueeze(-2)) @ vectors.mT
    rows, cols = torch.triu_indices(spd.shape[-1], spd.shape[-1])
    scale = torch.where(rows == cols, 1.0, math.sqrt(2.0)).to(log.dtype)
    return (log[:, rows, cols] * scale).to(spd.dtype)
