r"""Differential privacy of uploads: clipping by a global L2 norm, Gaussian noise and its calibration.

The Gaussian mechanism on a sum of clipped client contributions (DP-FedAvg; McMahan et al., "Learning Differentially
Private Recurrent Language Models", ICLR 2018): each client's contribution :math:`u_k` is scaled to
:math:`\bar u_k = u_k \min(1, C / \|u_k\|_2)`, so adding or removing one client moves the sum by at most :math:`C`;
the server releases

.. math:: \frac{1}{m}\Big(\sum_k \bar u_k + \mathcal{N}(0, z^2 C^2 I)\Big)

with :math:`m` the expected number of clients per round and :math:`z` the noise multiplier. The privacy loss of many
such rounds, with clients sampled at rate :math:`q`, is tracked by a Rényi-DP accountant (Opacus's, see
:func:`noise_multiplier_for`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


def global_l2_norm(tensors: Mapping[str, Tensor]) -> Tensor:
    """The L2 norm of all tensors taken together, as if flattened into one vector (a 0-d float64 tensor).

    Example:
        >>> float(global_l2_norm({"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]])}))
        5.0

    """
    if not tensors:
        return torch.zeros((), dtype=torch.float64)
    return torch.stack([t.detach().double().pow(2).sum() for t in tensors.values()]).sum().sqrt()


def clip_by_global_norm(tensors: Mapping[str, Tensor], max_norm: float) -> tuple[dict[str, Tensor], float]:
    r"""Scale tensors jointly so that their global L2 norm is at most ``max_norm``.

    .. math:: \bar u = u \min\big(1, C / \|u\|_2\big)

    Args:
        tensors: floating tensors, keyed by name.
        max_norm: the clipping norm :math:`C > 0`.

    Returns:
        the clipped tensors (new tensors, same dtypes) and the global norm before clipping.

    Raises:
        ValueError: when ``max_norm`` is not positive.
        TypeError: when a tensor is not floating point (naming it).

    Example:
        >>> clipped, norm = clip_by_global_norm({"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0])}, 1.0)
        >>> norm, clipped["a"].tolist(), clipped["b"].tolist()
        (5.0, [0.6000000238418579, 0.0], [0.800000011920929])

    """
    if not max_norm > 0:
        raise ValueError(f"clip_by_global_norm: 'max_norm' must be positive, got {max_norm}")
    for name, value in tensors.items():
        if not value.is_floating_point():
            raise TypeError(f"clip_by_global_norm: tensor '{name}' has dtype {value.dtype}; only floats can be clipped")
    norm = float(global_l2_norm(tensors))
    scale = min(1.0, max_norm / norm) if norm > 0 else 1.0
    return {name: value * scale for name, value in tensors.items()}, norm


def gaussian_noise_std(noise_multiplier: float, clip_norm: float, num_clients: float = 1.0) -> float:
    r"""Standard deviation of the Gaussian noise on a mean of ``num_clients`` clipped contributions: :math:`zC/m`.

    Args:
        noise_multiplier: :math:`z`, the noise standard deviation on the *sum* in units of the sensitivity :math:`C`.
        clip_norm: :math:`C`, the L2 sensitivity of the sum to one client.
        num_clients: :math:`m`, the fixed divisor of the sum (1 for noise on one client's own contribution).

    Example:
        >>> gaussian_noise_std(noise_multiplier=2.0, clip_norm=0.5, num_clients=10)
        0.1

    """
    if noise_multiplier < 0 or clip_norm <= 0 or num_clients <= 0:
        raise ValueError(
            "gaussian_noise_std: need noise_multiplier >= 0, clip_norm > 0 and num_clients > 0, got"
            f" {noise_multiplier}, {clip_norm}, {num_clients}"
        )
    return noise_multiplier * clip_norm / num_clients


def add_gaussian_noise(tensors: Mapping[str, Tensor], std: float, generator: torch.Generator) -> dict[str, Tensor]:
    r"""Add independent :math:`\\mathcal{N}(0, \\mathrm{std}^2)` noise to every element, drawn from ``generator``.

    The noise is drawn on the generator's device in float32 (float64 for float64 tensors) in the order of
    ``tensors``, so the same generator state gives the same noise.

    Example:
        >>> noisy = add_gaussian_noise({"w": torch.zeros(3)}, 0.0, torch.Generator().manual_seed(0))
        >>> noisy["w"].tolist()
        [0.0, 0.0, 0.0]

    """
    noisy = {}
    for name, value in tensors.items():
        dtype = torch.float64 if value.dtype == torch.float64 else torch.float32
        noise = torch.randn(value.shape, generator=generator, dtype=dtype, device=generator.device) * std
        noisy[name] = (value.to(dtype) + noise.to(value.device)).to(value.dtype)
    return noisy


def noise_multiplier_for(epsilon: float, delta: float, sample_rate: float, rounds: int) -> float:
    r"""The noise multiplier :math:`z` that spends ``(epsilon, delta)`` over ``rounds`` sampled Gaussian rounds.

    Calibrated with Opacus's Rényi-DP accountant (``opacus.accountants.utils.get_noise_multiplier``, tolerance 0.01
    in :math:`\varepsilon`); needs ``pip install fedhet[privacy]``.

    Args:
        epsilon: the target :math:`\varepsilon`.
        delta: the target :math:`\delta`.
        sample_rate: :math:`q`, the fraction of clients taking part in a round.
        rounds: the number of rounds.

    """
    from opacus.accountants.utils import get_noise_multiplier

    return float(
        get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate, steps=rounds)
    )
