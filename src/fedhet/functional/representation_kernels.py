r"""FedHeNN's representation kernels: a shared random alignment dataset and the kernel penalty of FLIC's baseline.

Makhija et al., "Architecture Agnostic Federated Learning for Neural Networks", ICML 2022, as adapted by Rakotomamonjy
et al. ("Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR 2024, section 6): every client embeds
the same random inputs (the RAD), the server averages the clients' Gram matrices :math:`K_i = A_i A_i^\top` into
:math:`K`, and each client adds a penalty between :math:`K` and its own current :math:`K_i` to its loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import torch
from torch import Tensor


def random_alignment_inputs(input_shape: Sequence[int], size: int = 100, seed: int = 0, image_side: int = 32) -> Tensor:
    """The client's view of one shared random dataset of standard normal inputs (the RAD).

    Vectors of dimension :math:`k_i` are the first :math:`k_i` coordinates of one common draw, whatever :math:`k_i`
    (clients whose features share a prefix, e.g. FLIC's noisy-features toy, see the same values there); images
    ``(C, H, W)`` are the top-left ``H x W`` crop of a common ``(C, image_side, image_side)`` draw.

    Args:
        input_shape: the client's sample shape, ``(k_i,)`` or ``(C, H, W)``.
        size: number of random inputs (100 in the reference code).
        seed: seed of the common draw (the same on every client).
        image_side: side of the common image draw; at least the client's ``H`` and ``W``.

    Returns:
        ``float32`` inputs of shape ``(size, *input_shape)``.

    Example:
        >>> a, b = random_alignment_inputs((3,), 4), random_alignment_inputs((7,), 4)
        >>> torch.equal(a, b[:, :3])
        True

    """
    rng = np.random.default_rng(seed)
    shape = tuple(input_shape)
    if len(shape) == 3:
        channels, height, width = shape
        if max(height, width) > image_side:
            raise ValueError(f"random_alignment_inputs: images {shape} are larger than image_side={image_side}")
        draw = rng.standard_normal((size, channels, image_side, image_side))[:, :, :height, :width]
        return torch.as_tensor(np.ascontiguousarray(draw), dtype=torch.float32)
    dim = int(np.prod(shape))
    draw = rng.standard_normal((dim, size)).T  # row by row: a longer vector extends a shorter one
    return torch.as_tensor(np.ascontiguousarray(draw), dtype=torch.float32).reshape(size, *shape)


def kernel_penalty(global_kernel: Tensor, local_kernel: Tensor) -> Tensor:
    r"""The reference code's FedHeNN penalty between the global kernel :math:`K` and a client's :math:`K_i`.

    .. math::
        \frac{\|K K_i\|_F^2}{\|K K^\top\|_F \, \max(1, \|K_i K_i\|_F)}

    (spec ``flic.md`` §6.11; not exactly Makhija et al.'s CKA form). Differentiable in ``local_kernel``.

    Args:
        global_kernel: :math:`K`, shape ``(n, n)``.
        local_kernel: :math:`K_i`, shape ``(n, n)``.

    Returns:
        a scalar.

    """
    numerator = (global_kernel @ local_kernel).pow(2).sum()
    scale = torch.linalg.matrix_norm(global_kernel @ global_kernel.T).clamp_min(torch.finfo(global_kernel.dtype).tiny)
    return cast(Tensor, numerator / scale / torch.linalg.matrix_norm(local_kernel @ local_kernel).clamp_min(1.0))
