"""Seeded transforms that give clients different feature spaces: pure torch and numpy, no Lightning.

They follow the heterogeneous-feature-space settings of FLIC (Rakotomamonjy et al. (2024), "Personalised Federated
Learning On Heterogeneous Feature Spaces", TMLR, section 6 and appendix S3.1): spurious noise features appended to the
inputs, a random Gaussian linear map to a random dimension, random pruning of features, and images at different
resolutions. Each transform takes one client's features, returns them as ``float32`` together with what it drew, so a
client's train and test data can be transformed alike by transforming them together (or by passing the draws back).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

_RESAMPLE_MODES = ("nearest", "nearest-exact", "bilinear", "bicubic", "area")


def add_noise_features(
    x: Tensor | np.ndarray,
    seed: int,
    *,
    min_added: int = 1,
    max_added: int = 10,
    noise_std: float = 1.0,
) -> tuple[Tensor, int]:
    r"""Append a random number of pure-noise features to every sample.

    The number :math:`a \sim \mathcal{U}\{\text{min\_added}, \dots, \text{max\_added}\}` is drawn first, then an
    ``(N, a)`` block of i.i.d. :math:`\mathcal{N}(0, \text{noise\_std}^2)` values is appended after the original
    features. This is FLIC's "noisy features" toy (Rakotomamonjy et al. (2024), TMLR, appendix S3.1.1): :math:`a`
    between 1 and 10, standard normal noise, drawn independently for every sample.

    Args:
        x: features, shape ``(N, *feature_shape)``; flattened to ``(N, D)``.
        seed: seed of the ``numpy.random.default_rng`` that draws :math:`a` and the noise.
        min_added: fewest added features, at least 0.
        max_added: most added features, at least ``min_added``.
        noise_std: standard deviation of the noise, non-negative.

    Returns:
        the features with the noise appended, ``float32`` of shape ``(N, D + a)``, and :math:`a`.

    Raises:
        ValueError: when an argument is out of range or ``x`` has fewer than two dimensions.

    Example:
        >>> x = torch.ones(4, 5)
        >>> noisy, added = add_noise_features(x, seed=0)
        >>> noisy.shape == (4, 5 + added), bool(torch.equal(noisy[:, :5], x))
        (True, True)

    """
    flat = _as_flat_features(x)
    if min_added < 0 or max_added < min_added:
        raise ValueError(
            f"`min_added` and `max_added` must satisfy 0 <= min_added <= max_added, got {min_added}, {max_added}"
        )
    if not noise_std >= 0 or not math.isfinite(noise_std):
        raise ValueError(f"`noise_std` must be a non-negative finite number, got {noise_std}")
    rng = np.random.default_rng(seed)
    added = int(rng.integers(min_added, max_added + 1))
    noise = torch.from_numpy(rng.standard_normal((flat.shape[0], added), dtype=np.float32) * np.float32(noise_std))
    return torch.cat([flat, noise.to(flat.device)], dim=1), added


def random_linear_map(
    x: Tensor | np.ndarray,
    seed: int,
    *,
    min_dim: int = 3,
    max_dim: int = 100,
    out_dim: int | None = None,
    std: float = 1.0,
) -> tuple[Tensor, Tensor]:
    r"""Map every sample through one random Gaussian matrix to a random number of dimensions: :math:`x' = x A`.

    The output dimension :math:`d \sim \mathcal{U}\{\text{min\_dim}, \dots, \text{max\_dim}\}` (or ``out_dim``) is
    drawn first, then :math:`A \in \mathbb{R}^{D \times d}` with i.i.d. :math:`\mathcal{N}(0, \text{std}^2)` entries.
    This is FLIC's "linear mapping" toy (Rakotomamonjy et al. (2024), TMLR, appendix S3.1.1), whose paper says
    :math:`d` from 3 to 100 (its code draws 3 to 99).

    Args:
        x: features, shape ``(N, *feature_shape)``; flattened to ``(N, D)``.
        seed: seed of the ``numpy.random.default_rng`` that draws :math:`d` and :math:`A`.
        min_dim: smallest output dimension, at least 1.
        max_dim: largest output dimension, at least ``min_dim``.
        out_dim: a fixed output dimension instead of a random one.
        std: standard deviation of the entries of :math:`A`, positive.

    Returns:
        the mapped features, ``float32`` of shape ``(N, d)``, and :math:`A`, ``float32`` of shape ``(D, d)``.

    Raises:
        ValueError: when an argument is out of range or ``x`` has fewer than two dimensions.

    Example:
        >>> x = torch.randn(6, 5)
        >>> mapped, matrix = random_linear_map(x, seed=0, out_dim=7)
        >>> tuple(matrix.shape), bool(torch.allclose(mapped, x @ matrix))
        ((5, 7), True)

    """
    flat = _as_flat_features(x)
    if out_dim is not None:
        if out_dim < 1:
            raise ValueError(f"`out_dim` must be at least 1, got {out_dim}")
    elif min_dim < 1 or max_dim < min_dim:
        raise ValueError(f"`min_dim` and `max_dim` must satisfy 1 <= min_dim <= max_dim, got {min_dim}, {max_dim}")
    if not std > 0 or not math.isfinite(std):
        raise ValueError(f"`std` must be a positive finite number, got {std}")
    rng = np.random.default_rng(seed)
    dim = out_dim if out_dim is not None else int(rng.integers(min_dim, max_dim + 1))
    matrix = torch.from_numpy(rng.standard_normal((flat.shape[1], dim), dtype=np.float32) * np.float32(std))
    matrix = matrix.to(flat.device)
    return flat @ matrix, matrix


def prune_features(
    x: Tensor | np.ndarray,
    seed: int,
    *,
    fraction: float = 0.1,
    up_to: bool = False,
    permute: bool = False,
) -> tuple[Tensor, Tensor]:
    r"""Drop a random subset of the features (columns) of every sample.

    :math:`\lfloor \text{fraction} \cdot D \rfloor` columns are dropped, the same for every sample; with ``up_to``
    the number dropped is drawn uniformly from 0 to that many. FLIC's TextCaps setting prunes "up to 10%" of the
    features per client (Rakotomamonjy et al. (2024), TMLR, section 6); its code also permutes the kept columns,
    which ``permute`` does.

    Args:
        x: features, shape ``(N, *feature_shape)``; flattened to ``(N, D)``.
        seed: seed of the ``numpy.random.default_rng`` that picks the columns.
        fraction: share of the columns to drop, in ``[0, 1)``.
        up_to: drop a uniformly drawn number of columns between 0 and ``floor(fraction * D)``.
        permute: shuffle the kept columns instead of keeping their order.

    Returns:
        the kept features ``x[:, kept]``, ``float32`` of shape ``(N, D - dropped)``, and ``kept``, the ``int64``
        indices of the kept columns in output order (sorted unless ``permute``).

    Raises:
        ValueError: when ``fraction`` is outside ``[0, 1)`` or ``x`` has fewer than two dimensions.

    Example:
        >>> x = torch.arange(20.0).reshape(2, 10)
        >>> pruned, kept = prune_features(x, seed=0)
        >>> tuple(pruned.shape), bool(torch.equal(pruned, x[:, kept]))
        ((2, 9), True)

    """
    flat = _as_flat_features(x)
    if not 0 <= fraction < 1:
        raise ValueError(f"`fraction` must be in [0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    most = math.floor(fraction * flat.shape[1] + 1e-9)
    dropped = int(rng.integers(0, most + 1)) if up_to else most
    kept = rng.choice(flat.shape[1], size=flat.shape[1] - dropped, replace=False)
    kept = rng.permutation(kept) if permute else np.sort(kept)
    kept_tensor = torch.from_numpy(kept.astype(np.int64)).to(flat.device)
    return flat.index_select(1, kept_tensor), kept_tensor


def resample_images(
    x: Tensor | np.ndarray,
    size: int | Sequence[int],
    *,
    image_shape: Sequence[int] | None = None,
    mode: str = "bilinear",
    antialias: bool = False,
) -> Tensor:
    """Resample images to another resolution with :func:`torch.nn.functional.interpolate`.

    FLIC's digits setting gives clients images of different resolutions (MNIST 28x28 and USPS 16x16; Rakotomamonjy
    et al. (2024), TMLR, section 6); this puts one client's images at its own resolution. Nothing is drawn. Bilinear
    interpolation (``align_corners=False``) keeps a constant image constant and, halving an image, averages each 2x2
    tile.

    Args:
        x: images of shape ``(N, C, H, W)``, or flat features of shape ``(N, D)`` with ``image_shape`` given.
        size: the new ``(H', W')``, or one side for a square.
        image_shape: ``(H, W)`` or ``(C, H, W)`` of a flat sample; required for flat input, where ``D`` must be its
            product.
        mode: interpolation mode: ``"bilinear"``, ``"bicubic"``, ``"area"``, ``"nearest"`` or ``"nearest-exact"``.
        antialias: low-pass filter before downsampling (bilinear and bicubic only).

    Returns:
        ``float32`` images of shape ``(N, C, H', W')``, or flat ``(N, C * H' * W')`` for flat input.

    Raises:
        ValueError: when the shapes, ``size`` or ``mode`` are malformed.

    Example:
        >>> images = torch.full((2, 1, 8, 8), 0.5)
        >>> small = resample_images(images, 4)
        >>> tuple(small.shape), bool(torch.allclose(small, torch.tensor(0.5)))
        ((2, 1, 4, 4), True)
        >>> resample_images(torch.rand(3, 64), (4, 4), image_shape=(8, 8)).shape
        torch.Size([3, 16])

    """
    if mode not in _RESAMPLE_MODES:
        raise ValueError(f"`mode` must be one of {_RESAMPLE_MODES}, got {mode!r}")
    if antialias and mode not in ("bilinear", "bicubic"):
        raise ValueError(f"`antialias` works with the bilinear and bicubic modes only, not {mode!r}")
    sizes = (size, size) if isinstance(size, int) else tuple(size)
    if len(sizes) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"`size` must be a positive int or a pair (H, W) of them, got {size!r}")
    images = torch.as_tensor(x).to(torch.float32)
    flat_input = image_shape is not None
    if image_shape is not None:
        shape = tuple(image_shape)
        shape = (1, *shape) if len(shape) == 2 else shape
        if len(shape) != 3 or images.ndim != 2 or images.shape[1] != math.prod(shape):
            raise ValueError(
                f"`image_shape` {tuple(image_shape)} must be (H, W) or (C, H, W) and match flat features of shape"
                f" (N, D), got {tuple(images.shape)}"
            )
        images = images.reshape(len(images), *shape)
    elif images.ndim != 4:
        raise ValueError(
            f"`x` must have shape (N, C, H, W), or give `image_shape` for flat input; got {tuple(images.shape)}"
        )
    align = False if mode in ("bilinear", "bicubic") else None
    resized = F.interpolate(images, size=sizes, mode=mode, align_corners=align, antialias=antialias)
    return resized.flatten(1) if flat_input else resized


def _as_flat_features(x: Tensor | np.ndarray) -> Tensor:
    """Return ``x`` as a ``float32`` tensor of shape ``(N, D)``, flattening every dimension after the first."""
    tensor = torch.as_tensor(x)
    if tensor.ndim < 2:
        raise ValueError(f"`x` must have shape (N, *feature_shape), got {tuple(tensor.shape)}")
    return tensor.to(torch.float32).flatten(1)
