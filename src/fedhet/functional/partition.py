"""Seeded ways of cutting a pooled dataset into clients and splits: pure numpy, no Lightning."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from torch import Tensor


def dirichlet_label_skew(
    labels: Tensor | np.ndarray,
    num_clients: int,
    alpha: float,
    seed: int,
    min_samples: int = 1,
    max_retries: int = 100,
) -> list[np.ndarray]:
    r"""Share a labelled dataset among clients with Dirichlet label skew.

    For every class, the class's samples are shuffled and cut among the clients in proportions
    :math:`p \sim \mathrm{Dir}(\alpha \mathbf{1}_K)`, with :math:`K` the number of clients. A small ``alpha`` gives
    each client a few dominant classes; a large ``alpha`` approaches an i.i.d. split. This is the per-class form of
    the scheme studied by Hsu et al. (2019), "Measuring the Effects of Non-Identical Data Distribution for Federated
    Visual Classification" (arXiv:1909.06335), as written by Yurochkin et al. (2019), "Bayesian Nonparametric
    Federated Learning of Neural Networks" (ICML). The whole draw is repeated until every client holds at least
    ``min_samples`` samples.

    Args:
        labels: class label of every sample, shape ``(N,)``; any integer values.
        num_clients: number of clients :math:`K`, at least 1.
        alpha: Dirichlet concentration, positive.
        seed: seed of the ``numpy.random.default_rng`` that makes every draw.
        min_samples: fewest samples a client may receive; 0 allows empty clients.
        max_retries: how many complete draws to try before giving up.

    Returns:
        ``num_clients`` sorted ``int64`` arrays of sample indices; they are disjoint and together hold every index in
        ``range(N)`` exactly once.

    Raises:
        ValueError: when an argument is out of range, when ``num_clients * min_samples > N``, or when no draw in
            ``max_retries`` gave every client ``min_samples`` samples.

    Example:
        >>> import numpy as np
        >>> parts = dirichlet_label_skew(np.repeat([0, 1, 2], 20), num_clients=3, alpha=0.5, seed=0, min_samples=5)
        >>> sorted(np.concatenate(parts).tolist()) == list(range(60))
        True
        >>> all(len(part) >= 5 for part in parts)
        True

    """
    labels = _as_label_array(labels)
    if num_clients < 1:
        raise ValueError(f"`num_clients` must be at least 1, got {num_clients}")
    if not alpha > 0 or not math.isfinite(alpha):
        raise ValueError(f"`alpha` must be a positive finite number, got {alpha}")
    if min_samples < 0:
        raise ValueError(f"`min_samples` must be non-negative, got {min_samples}")
    if max_retries < 1:
        raise ValueError(f"`max_retries` must be at least 1, got {max_retries}")
    if num_clients * min_samples > len(labels):
        raise ValueError(
            f"cannot give {num_clients} clients at least {min_samples} samples each from {len(labels)} samples"
            f" (`num_clients` may be at most len(labels) // min_samples = {len(labels) // max(min_samples, 1)})"
        )

    rng = np.random.default_rng(seed)
    class_members = [np.flatnonzero(labels == value) for value in np.unique(labels)]
    for _ in range(max_retries):
        parts = _draw_label_skew(class_members, num_clients, alpha, rng)
        if min(len(part) for part in parts) >= min_samples:
            return parts
    raise ValueError(
        f"no Dirichlet draw with alpha={alpha} gave each of {num_clients} clients at least {min_samples} samples"
        f" in {max_retries} tries; raise `alpha` or `max_retries`, or lower `num_clients` or `min_samples`"
    )


def split_indices(n: int, fractions: Sequence[float], seed: int) -> list[np.ndarray]:
    """Split ``range(n)`` at random into parts of the given fractions, e.g. train, validation and test.

    The indices are permuted once and cut into consecutive parts. Part sizes are ``fractions * n`` rounded by largest
    remainder (ties go to the earlier part), so they always add up to ``n``.

    Args:
        n: number of indices to split, non-negative.
        fractions: share of each part, non-negative and summing to 1; a part may be empty.
        seed: seed of the ``numpy.random.default_rng`` that draws the permutation.

    Returns:
        one sorted ``int64`` array per fraction; disjoint, covering ``range(n)``.

    Raises:
        ValueError: when ``n`` is negative or ``fractions`` is empty, has a negative entry or does not sum to 1.

    Example:
        >>> [len(part) for part in split_indices(10, [0.75, 0.0, 0.25], seed=0)]
        [8, 0, 2]

    """
    if n < 0:
        raise ValueError(f"`n` must be non-negative, got {n}")
    shares = np.asarray(fractions, dtype=np.float64)
    if shares.ndim != 1 or shares.size == 0:
        raise ValueError(f"`fractions` must be a non-empty sequence of numbers, got {fractions!r}")
    if not np.all(np.isfinite(shares)) or np.any(shares < 0) or not math.isclose(shares.sum(), 1.0, abs_tol=1e-6):
        raise ValueError(f"`fractions` must be non-negative and sum to 1, got {list(fractions)}")

    exact = shares / shares.sum() * n
    sizes = np.floor(exact).astype(np.int64)
    leftover = n - int(sizes.sum())
    sizes[np.argsort(-(exact - sizes), kind="stable")[:leftover]] += 1

    permutation = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.split(permutation, np.cumsum(sizes)[:-1])]


def _as_label_array(labels: Tensor | np.ndarray) -> np.ndarray:
    """Return the labels as a 1-D numpy array, checking their shape."""
    array = labels.detach().cpu().numpy() if isinstance(labels, Tensor) else np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"`labels` must be one-dimensional, got shape {array.shape}")
    return array


def _draw_label_skew(
    class_members: Sequence[np.ndarray], num_clients: int, alpha: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Make one Dirichlet draw per class and cut that class's shuffled members accordingly.

    Args:
        class_members: indices of the samples of each class.
        num_clients: number of clients.
        alpha: Dirichlet concentration.
        rng: the generator every draw comes from.

    Returns:
        the sorted indices held by each client.

    """
    pieces: list[list[np.ndarray]] = [[np.empty(0, dtype=np.int64)] for _ in range(num_clients)]
    for members in class_members:
        shuffled = rng.permutation(members)
        proportions = rng.dirichlet(np.full(num_clients, alpha))
        cuts = (np.cumsum(proportions)[:-1] * len(shuffled)).astype(np.int64)
        for client, piece in enumerate(np.split(shuffled, cuts)):
            pieces[client].append(piece)
    return [np.sort(np.concatenate(client_pieces)) for client_pieces in pieces]
