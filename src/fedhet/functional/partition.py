"""Seeded ways of cutting a pooled dataset into clients and splits: pure numpy, no Lightning.

Every partitioner takes the pooled labels (or the pooled size), a number of clients and a seed, and returns one sorted
``int64`` array of sample indices per client. Label skew: :func:`dirichlet_label_skew`, :func:`shard_label_skew`
(pathological "c classes per client") and :func:`dominant_class_skew` (FedPAC's "s% uniform + dominant classes of the
client's group"); quantity skew: :func:`quantity_skew`; concept shift: :func:`permute_labels_by_group`; hybrid
feature-block and sample partitions (HyFEM): :func:`hybrid_partition` with :func:`grid_blocks`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

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

    sizes = _apportion(n, shares)
    permutation = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.split(permutation, np.cumsum(sizes)[:-1])]


def stratified_split_indices(labels: Tensor | np.ndarray, fractions: Sequence[float], seed: int) -> list[np.ndarray]:
    """Split samples at random into parts of the given fractions, each class cut in those fractions on its own.

    Each class's samples are permuted and cut as :func:`split_indices` cuts ``range(n)`` (sizes by largest remainder,
    ties to the earlier part), so every part holds the classes in about the pooled proportions. Where classes are so
    small that this would leave empty a part that :func:`split_indices` fills (ten singleton classes and a 20 % test
    part, say), the split is not stratified: :func:`split_indices` is returned instead.

    Args:
        labels: class of every sample, shape ``(N,)``; any integer values.
        fractions: share of each part, non-negative and summing to 1; a part may be empty.
        seed: seed of the ``numpy.random.default_rng`` that draws the permutations.

    Returns:
        one sorted ``int64`` array per fraction; disjoint, covering ``range(N)``.

    Raises:
        ValueError: as :func:`split_indices` does for bad ``fractions``.

    Example:
        >>> parts = stratified_split_indices(np.array([0] * 8 + [1] * 4), [0.75, 0.25], seed=0)
        >>> [np.bincount(np.array([0] * 8 + [1] * 4)[part]).tolist() for part in parts]
        [[6, 3], [2, 1]]

    """
    y = _as_label_array(labels)
    plain = split_indices(len(y), fractions, seed)
    shares = np.asarray(fractions, dtype=np.float64)
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in fractions]
    for value in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == value))
        for part, chunk in zip(parts, np.split(members, np.cumsum(_apportion(len(members), shares))[:-1]), strict=True):
            part.append(chunk)
    stratified = [np.sort(np.concatenate(part)).astype(np.int64) if part else np.zeros(0, np.int64) for part in parts]
    if any(len(cut) == 0 and len(fill) > 0 for cut, fill in zip(stratified, plain, strict=True)):
        return plain
    return stratified


def shard_label_skew(
    labels: Tensor | np.ndarray, num_clients: int, classes_per_client: int | Sequence[int], seed: int
) -> list[np.ndarray]:
    """Give every client exactly ``c`` classes and split each class's samples evenly among the clients holding it.

    This is the "pathological" non-i.i.d. split of McMahan et al. (2017), "Communication-Efficient Learning of Deep
    Networks from Decentralized Data" (AISTATS), in the per-class shard form of FLIC's toy data (Rakotomamonjy et al.
    (2024), "Personalised Federated Learning On Heterogeneous Feature Spaces", TMLR, appendix S3.1).
    Clients pick their classes in turn, each taking the ``c`` classes held by the fewest clients so far (ties broken
    at random), so a client never holds a class twice and the numbers of holders of any two classes differ by at most
    one. Each class's samples are then shuffled and cut into as many near-equal runs as it has holders.

    Args:
        labels: class label of every sample, shape ``(N,)``; any integer values; the classes are the distinct values.
        num_clients: number of clients, at least 1.
        classes_per_client: classes per client ``c``, between 1 and the number of classes; or one count per client.
        seed: seed of the ``numpy.random.default_rng`` that makes every draw.

    Returns:
        ``num_clients`` sorted ``int64`` arrays of sample indices, disjoint; client ``i`` holds samples of exactly
        ``classes_per_client[i]`` classes. When ``num_clients * c`` is at least the number of classes, every class
        has a holder and the arrays cover ``range(N)``; otherwise the samples of unheld classes are left out.

    Raises:
        ValueError: when an argument is out of range, or a class has fewer samples than clients holding it.

    Example:
        >>> import numpy as np
        >>> labels = np.repeat(np.arange(4), 6)
        >>> parts = shard_label_skew(labels, num_clients=4, classes_per_client=2, seed=0)
        >>> [len(np.unique(labels[part])) for part in parts], [len(part) for part in parts]
        ([2, 2, 2, 2], [6, 6, 6, 6])

    """
    labels = _as_label_array(labels)
    if num_clients < 1:
        raise ValueError(f"`num_clients` must be at least 1, got {num_clients}")
    classes, encoded = np.unique(labels, return_inverse=True)
    counts_per_client = _per_client(classes_per_client, num_clients, "classes_per_client")
    if np.any(counts_per_client < 1) or np.any(counts_per_client > len(classes)):
        raise ValueError(
            f"`classes_per_client` must be between 1 and the number of classes ({len(classes)}), got"
            f" {classes_per_client}"
        )

    rng = np.random.default_rng(seed)
    holders_count = np.zeros(len(classes), dtype=np.int64)
    holders: list[list[int]] = [[] for _ in classes]
    for client, count in enumerate(counts_per_client):
        order = np.lexsort((rng.random(len(classes)), holders_count))
        for position in order[:count]:
            holders[position].append(client)
        holders_count[order[:count]] += 1

    pieces: list[list[np.ndarray]] = [[np.empty(0, dtype=np.int64)] for _ in range(num_clients)]
    for position, clients in enumerate(holders):
        if not clients:
            continue
        members = rng.permutation(np.flatnonzero(encoded == position))
        if len(members) < len(clients):
            raise ValueError(
                f"class {classes[position]} of `labels` has {len(members)} samples for {len(clients)} clients holding"
                f" it; lower `num_clients` or `classes_per_client`"
            )
        for client, piece in zip(clients, np.array_split(members, len(clients)), strict=True):
            pieces[client].append(piece)
    return [np.sort(np.concatenate(client_pieces)) for client_pieces in pieces]


def dominant_class_sets(num_classes: int, num_groups: int = 5, classes_per_group: int = 3) -> list[tuple[int, ...]]:
    """The dominant classes of each client group in FedPAC's default partition.

    Group ``g`` dominates ``classes_per_group`` consecutive classes starting at ``g * (num_classes // num_groups)``,
    wrapping around; for 10 classes and 5 groups of 3 these are ``{0,1,2}, {2,3,4}, {4,5,6}, {6,7,8}, {8,9,0}``, as in
    Xu et al. (2023), "Personalized Federated Learning with Feature Alignment and Classifier Collaboration" (ICLR),
    appendix B.2.

    Args:
        num_classes: number of classes ``K``, at least 1.
        num_groups: number of client groups, at least 1.
        classes_per_group: dominant classes per group, between 1 and ``num_classes``.

    Returns:
        one tuple of class labels per group.

    Raises:
        ValueError: when an argument is out of range.

    Example:
        >>> dominant_class_sets(10)
        [(0, 1, 2), (2, 3, 4), (4, 5, 6), (6, 7, 8), (8, 9, 0)]

    """
    if num_classes < 1:
        raise ValueError(f"`num_classes` must be at least 1, got {num_classes}")
    if num_groups < 1:
        raise ValueError(f"`num_groups` must be at least 1, got {num_groups}")
    if not 1 <= classes_per_group <= num_classes:
        raise ValueError(f"`classes_per_group` must be in [1, num_classes={num_classes}], got {classes_per_group}")
    step = num_classes // num_groups
    return [tuple((group * step + j) % num_classes for j in range(classes_per_group)) for group in range(num_groups)]


def dominant_class_skew(
    labels: Tensor | np.ndarray,
    num_clients: int,
    samples_per_client: int | Sequence[int],
    seed: int,
    *,
    uniform_fraction: float = 0.2,
    num_groups: int = 5,
    classes_per_group: int = 3,
    dominant_classes: Sequence[Sequence[int]] | None = None,
    num_classes: int | None = None,
    allow_reuse: bool = False,
) -> list[np.ndarray]:
    r"""FedPAC's partition: a share ``s`` of each client's samples over all classes, the rest over dominant classes.

    The dominant classes are those of the client's group, and client ``i`` belongs to group ``i mod G`` (groups are
    interleaved, as in the reference code of Xu et al. (2023), "Personalized Federated Learning with Feature Alignment
    and Classifier Collaboration", ICLR, appendix B.2). With ``n`` samples, ``K`` classes and the group's dominant
    classes :math:`D`, the client takes :math:`u = \lfloor n s \rfloor` "uniform" samples,
    :math:`\lfloor u / K \rfloor` of every class and the remainder of the last class, and :math:`n - u` dominant
    samples, :math:`\lfloor (n - u) / |D| \rfloor` of each dominant class and the remainder of the last one in
    :math:`D`'s order. For ``n = 600``, ``s = 0.2`` and 10 classes that is 12 samples of every class plus 160 of each
    of the three dominant ones (the example below: ``n = 100``, group 4 dominates ``(8, 9, 0)``, so class 0 takes the
    remainder). Samples are taken in consecutive runs from a seeded shuffle of each class, clients in order.

    Args:
        labels: class label of every sample, shape ``(N,)``, integers in ``[0, num_classes)``.
        num_clients: number of clients, at least 1.
        samples_per_client: samples ``n`` of every client, or one count per client (e.g. for quantity skew).
        seed: seed of the ``numpy.random.default_rng`` that shuffles each class.
        uniform_fraction: the share ``s`` in ``[0, 1]`` drawn uniformly over all classes.
        num_groups: number of groups ``G`` when ``dominant_classes`` is not given (see :func:`dominant_class_sets`).
        classes_per_group: dominant classes per group when ``dominant_classes`` is not given.
        dominant_classes: the dominant classes of each group, e.g. digits, upper- and lower-case letters for EMNIST;
            overrides ``num_groups`` and ``classes_per_group``.
        num_classes: number of classes ``K``; ``labels.max() + 1`` by default.
        allow_reuse: when a class runs out, wrap around its shuffled run as the reference code does, so clients (or
            one client) may share samples; otherwise running out is an error.

    Returns:
        ``num_clients`` sorted ``int64`` arrays of sample indices; disjoint unless ``allow_reuse`` made a class wrap
        around.

    Raises:
        ValueError: when an argument is out of range, or a class runs out of samples and ``allow_reuse`` is off.

    Example:
        >>> import numpy as np
        >>> labels = np.repeat(np.arange(10), 200)
        >>> parts = dominant_class_skew(labels, num_clients=5, samples_per_client=100, seed=0)
        >>> np.bincount(labels[parts[4]], minlength=10).tolist()
        [30, 2, 2, 2, 2, 2, 2, 2, 28, 28]

    """
    labels = _as_label_array(labels)
    if num_clients < 1:
        raise ValueError(f"`num_clients` must be at least 1, got {num_clients}")
    sizes = _per_client(samples_per_client, num_clients, "samples_per_client")
    if np.any(sizes < 1):
        raise ValueError(f"`samples_per_client` must be at least 1, got {samples_per_client}")
    if not 0 <= uniform_fraction <= 1:
        raise ValueError(f"`uniform_fraction` must be in [0, 1], got {uniform_fraction}")
    if len(labels) and (labels.min() < 0 or (num_classes is not None and labels.max() >= num_classes)):
        raise ValueError(f"`labels` must lie in [0, num_classes), got values in [{labels.min()}, {labels.max()}]")
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if len(labels) else 0
    if num_classes < 1:
        raise ValueError(f"`num_classes` must be at least 1, got {num_classes}")
    if dominant_classes is None:
        groups = dominant_class_sets(num_classes, num_groups, classes_per_group)
    else:
        groups = [tuple(int(c) for c in group) for group in dominant_classes]
        if not groups or any(not group for group in groups):
            raise ValueError(f"`dominant_classes` must be a non-empty list of non-empty class lists, got {groups}")
        if any(not 0 <= c < num_classes for group in groups for c in group):
            raise ValueError(f"`dominant_classes` must hold classes in [0, {num_classes}), got {groups}")
        if any(len(set(group)) != len(group) for group in groups):
            raise ValueError(f"`dominant_classes` must not repeat a class within a group, got {groups}")

    rng = np.random.default_rng(seed)
    pools = [rng.permutation(np.flatnonzero(labels == value)) for value in range(num_classes)]
    cursors = np.zeros(num_classes, dtype=np.int64)
    parts = []
    for client, size in enumerate(sizes):
        counts = _dominant_counts(int(size), uniform_fraction, num_classes, groups[client % len(groups)])
        taken = [np.empty(0, dtype=np.int64)]
        for value in np.flatnonzero(counts):
            pool, count, start = pools[value], int(counts[value]), int(cursors[value])
            if start + count > len(pool) and (not allow_reuse or len(pool) == 0):
                raise ValueError(
                    f"class {value} has {len(pool)} samples, too few for `samples_per_client`={samples_per_client}"
                    f" over `num_clients`={num_clients} (client {client} needs {count} more after {start});"
                    " lower either, or set `allow_reuse`"
                )
            taken.append(pool[np.arange(start, start + count) % len(pool)])
            cursors[value] = (start + count) % len(pool) if allow_reuse else start + count
        parts.append(np.sort(np.concatenate(taken)))
    return parts


def quantity_skew(
    num_samples: int,
    num_clients: int,
    seed: int,
    *,
    distribution: str = "power_law",
    exponent: float = 1.5,
    alpha: float = 1.0,
    min_samples: int = 1,
) -> list[np.ndarray]:
    r"""Cut ``range(num_samples)`` at random into clients of unequal sizes (quantity skew).

    Client weights :math:`w` are drawn either from a power law, i.i.d. Pareto draws with density
    :math:`\propto w^{-(a + 1)}` on :math:`[1, \infty)` (``distribution="power_law"``, ``a = exponent``; a smaller
    exponent gives a heavier tail, cf. the power-law client sizes of Caldas et al. (2018), "LEAF: A Benchmark for
    Federated Settings", arXiv:1812.01097), or from :math:`\mathrm{Dir}(\alpha \mathbf{1})` (``"dirichlet"``, as in
    Li et al. (2022), "Federated Learning on Non-IID Data Silos: An Experimental Study", ICDE). Every client first gets
    ``min_samples`` samples; the rest are shared in proportion to the weights by largest remainder. Labels are not
    looked at, so each client's label mix is that of a uniform random subset.

    Args:
        num_samples: number of pooled samples ``N``, non-negative.
        num_clients: number of clients, at least 1.
        seed: seed of the ``numpy.random.default_rng`` that makes every draw.
        distribution: ``"power_law"`` or ``"dirichlet"``.
        exponent: Pareto shape ``a`` of the power law, positive.
        alpha: Dirichlet concentration, positive.
        min_samples: fewest samples of a client, non-negative.

    Returns:
        ``num_clients`` sorted ``int64`` arrays of sample indices, disjoint, covering ``range(num_samples)``, each of
        at least ``min_samples``.

    Raises:
        ValueError: when an argument is out of range or ``num_clients * min_samples > num_samples``.

    Example:
        >>> parts = quantity_skew(100, num_clients=4, seed=0, min_samples=10)
        >>> sum(len(part) for part in parts), min(len(part) for part in parts) >= 10
        (100, True)

    """
    if num_samples < 0:
        raise ValueError(f"`num_samples` must be non-negative, got {num_samples}")
    if num_clients < 1:
        raise ValueError(f"`num_clients` must be at least 1, got {num_clients}")
    if min_samples < 0:
        raise ValueError(f"`min_samples` must be non-negative, got {min_samples}")
    if num_clients * min_samples > num_samples:
        raise ValueError(
            f"cannot give {num_clients} clients at least {min_samples} samples each from {num_samples} samples;"
            " lower `num_clients` or `min_samples`"
        )
    rng = np.random.default_rng(seed)
    if distribution == "power_law":
        if not exponent > 0 or not math.isfinite(exponent):
            raise ValueError(f"`exponent` must be a positive finite number, got {exponent}")
        weights = rng.pareto(exponent, num_clients) + 1.0
    elif distribution == "dirichlet":
        if not alpha > 0 or not math.isfinite(alpha):
            raise ValueError(f"`alpha` must be a positive finite number, got {alpha}")
        weights = rng.dirichlet(np.full(num_clients, alpha))
        if not np.all(np.isfinite(weights)) or weights.sum() <= 0:  # tiny alpha can underflow to all zeros
            weights = np.eye(num_clients)[rng.integers(num_clients)]
    else:
        raise ValueError(f"`distribution` must be 'power_law' or 'dirichlet', got {distribution!r}")
    if not np.all(np.isfinite(weights)):  # a huge power-law draw
        weights = np.isinf(weights).astype(np.float64)
    sizes = min_samples + _apportion(num_samples - num_clients * min_samples, weights)
    permutation = rng.permutation(num_samples)
    return [np.sort(part) for part in np.split(permutation, np.cumsum(sizes)[:-1])]


def permute_labels_by_group(
    labels: Tensor | np.ndarray,
    groups: Tensor | np.ndarray,
    num_classes: int,
    seed: int,
    num_groups: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Concept shift: relabel the samples of every group by its own random permutation of the classes.

    The same input then means a different class in different groups, as in FedPAC's concept-shift experiment (Xu et
    al. (2023), "Personalized Federated Learning with Feature Alignment and Classifier Collaboration", ICLR, table 3),
    where each client group applies its own label permutation. Group ``g`` draws permutation ``permutations[g]``
    (group 0 first) and a sample of class ``k`` in group ``g`` gets label ``permutations[g, k]``.

    Args:
        labels: class label of every sample, shape ``(N,)``, integers in ``[0, num_classes)``.
        groups: group of every sample, shape ``(N,)``, non-negative integers; e.g. ``client_index % G`` repeated over
            each client's samples.
        num_classes: number of classes ``K``, at least 1.
        seed: seed of the ``numpy.random.default_rng`` that draws the permutations.
        num_groups: number of groups ``G``, above every group in ``groups``; ``groups.max() + 1`` (0 when ``N = 0``)
            by default. Group ``g``'s permutation depends only on ``seed`` and ``g``.

    Returns:
        the new labels, ``int64`` of shape ``(N,)``, and the permutations, ``int64`` of shape ``(G, K)``.

    Raises:
        ValueError: when the shapes differ, a label is outside ``[0, num_classes)``, a group is negative or a group
            is not below ``num_groups``.

    Example:
        >>> import numpy as np
        >>> new, permutations = permute_labels_by_group(np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), 2, seed=3)
        >>> bool(np.all(new == permutations[[0, 0, 1, 1], [0, 1, 0, 1]]))
        True

    """
    labels = _as_label_array(labels)
    groups = _as_label_array(groups, "groups")
    if labels.shape != groups.shape:
        raise ValueError(f"`groups` must have the shape of `labels` {labels.shape}, got {groups.shape}")
    if num_classes < 1:
        raise ValueError(f"`num_classes` must be at least 1, got {num_classes}")
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"`labels` must lie in [0, {num_classes}), got values in [{labels.min()}, {labels.max()}]")
    if len(groups) and groups.min() < 0:
        raise ValueError(f"`groups` must be non-negative, got {groups.min()}")
    if num_groups is None:
        num_groups = int(groups.max()) + 1 if len(groups) else 0
    elif len(groups) and groups.max() >= num_groups:
        raise ValueError(f"`num_groups` is {num_groups} but `groups` holds group {groups.max()}")
    rng = np.random.default_rng(seed)
    permutations = np.empty((num_groups, num_classes), dtype=np.int64)
    for group in range(num_groups):
        permutations[group] = rng.permutation(num_classes)
    return permutations[groups.astype(np.int64), labels.astype(np.int64)], permutations


@dataclass(frozen=True)
class HybridPartition:
    """What :func:`hybrid_partition` gives each client, and what no client holds.

    Attributes:
        indices: each client's sorted ``int64`` sample indices, by client name, in the assignment's order.
        columns: each client's ``int64`` feature columns: its blocks' columns concatenated in the blocks' global
            order.
        feature_blocks: each client's ``{block name: width}`` in that same order, for
            :class:`~fedhet.datamodules.ClientDataModule`'s ``feature_blocks``.
        unheld: sorted indices of the samples that no client holds (their class has no holder).
        uncovered_cells: the ``(block, class)`` cells that no client holds, in block then class order.
        unused_fraction: share of the pooled ``(sample, column)`` entries over all block columns that no client holds.

    """

    indices: dict[str, np.ndarray]
    columns: dict[str, np.ndarray]
    feature_blocks: dict[str, dict[str, int]]
    unheld: np.ndarray
    uncovered_cells: tuple[tuple[str, int], ...]
    unused_fraction: float


def hybrid_partition(
    labels: Tensor | np.ndarray,
    assignment: Mapping[str, Mapping[str, Sequence[Hashable]]],
    block_columns: Mapping[Hashable, Sequence[int] | np.ndarray],
    seed: int,
    *,
    split_shared: bool = True,
) -> HybridPartition:
    """Hybrid feature-block and sample partition from an explicit table of each client's blocks and classes (HyFEM).

    Following Zhang et al. (2024), "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and
    Implementation" (TMLR), a client holds the samples of its classes restricted to the columns of its feature blocks;
    a client of a class sees all of that class's samples, so clients with different block sets overlap completely
    within a shared class. Clients that hold the same class with the *same* block set would hold identical data; with
    ``split_shared`` the samples of such a (block set, class) cell are shuffled and split evenly among them instead.
    Samples of classes no client holds are reported as ``unheld``; (block, class) cells no client holds as
    ``uncovered_cells``.

    Args:
        labels: class label of every sample, shape ``(N,)``, integers.
        assignment: ``{client: {"blocks": [...], "classes": [...]}}``; blocks are keys of ``block_columns`` (compared
            as strings), classes are label values; neither may be empty or repeat an entry.
        block_columns: the pooled feature columns of every block, in the blocks' global order, e.g. from
            :func:`grid_blocks`; blocks must not share a column.
        seed: seed of the ``numpy.random.default_rng`` that shuffles shared cells.
        split_shared: split the samples of a class among the clients that hold it with the same block set.

    Returns:
        the clients' sample indices, columns and feature blocks, and what no client holds.

    Raises:
        ValueError: naming ``assignment`` or ``block_columns`` when the table is malformed, names an unknown block, or
            leaves a client without samples.

    Example:
        >>> import numpy as np
        >>> table = {"a": {"blocks": ["left"], "classes": [0]}, "b": {"blocks": ["left", "right"], "classes": [0, 1]}}
        >>> split = hybrid_partition(np.array([0, 0, 1, 2]), table, {"left": [0, 1], "right": [2]}, seed=0)
        >>> split.indices["a"].tolist(), split.indices["b"].tolist(), split.columns["b"].tolist(), split.unheld.tolist()
        ([0, 1], [0, 1, 2], [0, 1, 2], [3])
        >>> split.uncovered_cells
        (('left', 2), ('right', 2))

    """
    labels = _as_label_array(labels)
    blocks = _check_block_columns(block_columns)
    table = _check_assignment(assignment, blocks)
    rng = np.random.default_rng(seed)

    pieces: dict[str, list[np.ndarray]] = {client: [np.empty(0, dtype=np.int64)] for client in table}
    held_classes = sorted({value for _, classes in table.values() for value in classes})
    for value in held_classes:
        members = np.flatnonzero(labels == value)
        cells: dict[frozenset[str], list[str]] = {}
        for client, (client_blocks, classes) in table.items():
            if value in classes:
                cells.setdefault(frozenset(client_blocks), []).append(client)
        for clients in cells.values():
            if split_shared and len(clients) > 1:
                for client, piece in zip(clients, np.array_split(rng.permutation(members), len(clients)), strict=True):
                    pieces[client].append(piece)
            else:
                for client in clients:
                    pieces[client].append(members)

    indices = {client: np.sort(np.concatenate(client_pieces)) for client, client_pieces in pieces.items()}
    for client, rows in indices.items():
        if len(rows) == 0:
            raise ValueError(f"`assignment` gives client '{client}' no samples: none of its classes is in `labels`")
    columns, feature_blocks = {}, {}
    for client, (client_blocks, _) in table.items():
        ordered = [name for name in blocks if name in client_blocks]
        columns[client] = np.concatenate([blocks[name] for name in ordered]).astype(np.int64)
        feature_blocks[client] = {name: len(blocks[name]) for name in ordered}

    unheld = np.flatnonzero(~np.isin(labels, held_classes)).astype(np.int64)
    values, class_sizes = np.unique(labels, return_counts=True)
    uncovered, unused = [], 0
    for name, block in blocks.items():
        for value, size in zip(values.tolist(), class_sizes.tolist(), strict=True):
            if not any(name in client_blocks and value in classes for client_blocks, classes in table.values()):
                uncovered.append((name, value))
                unused += size * len(block)
    total = len(labels) * sum(len(block) for block in blocks.values())
    return HybridPartition(
        indices=indices,
        columns=columns,
        feature_blocks=feature_blocks,
        unheld=unheld,
        uncovered_cells=tuple(uncovered),
        unused_fraction=unused / total if total else 0.0,
    )


def grid_blocks(image_shape: Sequence[int], grid: Sequence[int], split_channels: bool = False) -> dict[str, np.ndarray]:
    """Column indices of the tiles of a flattened image, as feature blocks for :func:`hybrid_partition`.

    The image of shape ``(C, H, W)`` (or ``(H, W)``, one channel) is flattened in C order; it is cut into ``rows x
    cols`` equal tiles, numbered row-major (top-left first). With ``split_channels`` every tile is further cut by
    channel, block ``b`` being tile ``b // C``, channel ``b % C``: the 12 blocks of HyFEM's CIFAR-10 setting (Zhang
    et al. (2024), TMLR) for a ``(3, 32, 32)`` image and a ``(2, 2)`` grid.

    Args:
        image_shape: ``(C, H, W)`` or ``(H, W)``.
        grid: ``(rows, cols)``; they must divide ``H`` and ``W``.
        split_channels: make one block per tile and channel.

    Returns:
        ``{"0": columns, "1": columns, ...}``, each a sorted ``int64`` array into the flattened image.

    Raises:
        ValueError: when the shapes are malformed or the grid does not divide the image.

    Example:
        >>> blocks = grid_blocks((4, 4), (2, 2))
        >>> list(blocks), blocks["1"].tolist()
        (['0', '1', '2', '3'], [2, 3, 6, 7])

    """
    shape = tuple(int(size) for size in image_shape)
    if len(shape) == 2:
        shape = (1, *shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"`image_shape` must be (C, H, W) or (H, W) with positive sizes, got {tuple(image_shape)}")
    rows, cols = (int(size) for size in grid) if len(grid) == 2 else (0, 0)
    channels, height, width = shape
    if rows < 1 or cols < 1 or height % rows or width % cols:
        raise ValueError(f"`grid` must be (rows, cols) dividing the image's (H, W) = {(height, width)}, got {grid}")
    flat = np.arange(channels * height * width, dtype=np.int64).reshape(shape)
    tile_h, tile_w = height // rows, width // cols
    blocks: dict[str, np.ndarray] = {}
    for row in range(rows):
        for col in range(cols):
            tile = flat[:, row * tile_h : (row + 1) * tile_h, col * tile_w : (col + 1) * tile_w]
            for part in [tile[c : c + 1] for c in range(channels)] if split_channels else [tile]:
                blocks[str(len(blocks))] = np.sort(part.ravel())
    return blocks


def _as_label_array(labels: Tensor | np.ndarray, name: str = "labels") -> np.ndarray:
    """Return the labels (or another per-sample integer array called ``name``) as a 1-D numpy array."""
    array = labels.detach().cpu().numpy() if isinstance(labels, Tensor) else np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"`{name}` must be one-dimensional, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`{name}` must hold integers, got dtype {array.dtype}")
    return array


def _per_client(value: int | Sequence[int], num_clients: int, name: str) -> np.ndarray:
    """Broadcast an integer, or check a per-client sequence of integers, to an ``int64`` array of ``num_clients``."""
    array = np.asarray(value)
    if array.ndim == 0:
        array = np.full(num_clients, array)
    if array.shape != (num_clients,) or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"`{name}` must be an integer or one integer per client ({num_clients}), got {value!r}")
    return array.astype(np.int64)


def _dominant_counts(size: int, uniform_fraction: float, num_classes: int, dominant: Sequence[int]) -> np.ndarray:
    """Per-class sample counts of one client in :func:`dominant_class_skew`, shape ``(num_classes,)``."""
    uniform = math.floor(size * uniform_fraction + 1e-9)
    counts = np.full(num_classes, uniform // num_classes, dtype=np.int64)
    counts[-1] += uniform - counts.sum()
    rest = size - uniform
    for position, value in enumerate(dominant):
        counts[value] += rest // len(dominant) + (rest % len(dominant) if position == len(dominant) - 1 else 0)
    return counts


def _check_block_columns(block_columns: Mapping[Hashable, Sequence[int] | np.ndarray]) -> dict[str, np.ndarray]:
    """Check a ``{block: columns}`` mapping, returning it keyed by block names as strings."""
    if not isinstance(block_columns, Mapping) or not block_columns:
        raise ValueError(f"`block_columns` must be a non-empty mapping of block to columns, got {block_columns!r}")
    blocks: dict[str, np.ndarray] = {}
    for name, columns in block_columns.items():
        array = np.asarray(columns)
        if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer) or array.min() < 0:
            raise ValueError(f"`block_columns` gives block '{name}' {columns!r}; expected non-empty columns >= 0")
        if str(name) in blocks:
            raise ValueError(f"`block_columns` names block '{name}' twice")
        blocks[str(name)] = array.astype(np.int64)
    every = np.concatenate(list(blocks.values()))
    if len(np.unique(every)) != len(every):
        raise ValueError("`block_columns` must not give a column to two blocks, nor twice to one")
    return blocks


def _check_assignment(
    assignment: Mapping[str, Mapping[str, Sequence[Hashable]]], blocks: Mapping[str, np.ndarray]
) -> dict[str, tuple[set[str], set[int]]]:
    """Check a ``{client: {"blocks": [...], "classes": [...]}}`` table, returning each client's block and class sets."""
    if not isinstance(assignment, Mapping) or not assignment:
        raise ValueError(f"`assignment` must be a non-empty mapping of client to blocks and classes; got {assignment}")
    table = {}
    for client, entry in assignment.items():
        if not isinstance(entry, Mapping) or set(entry) != {"blocks", "classes"}:
            raise ValueError(f"`assignment` entry of client '{client}' must have exactly the keys 'blocks', 'classes'")
        client_blocks = [str(block) for block in entry["blocks"]]
        classes = list(entry["classes"])
        if not client_blocks or len(set(client_blocks)) != len(client_blocks):
            raise ValueError(f"`assignment` gives client '{client}' blocks {entry['blocks']!r}; need distinct blocks")
        unknown = [block for block in client_blocks if block not in blocks]
        if unknown:
            raise ValueError(f"`assignment` gives client '{client}' unknown blocks {unknown}; known: {list(blocks)}")
        if (
            not classes
            or len(set(classes)) != len(classes)
            or any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) for c in classes)
        ):
            raise ValueError(f"`assignment` gives client '{client}' classes {classes!r}; need distinct integers")
        table[str(client)] = (set(client_blocks), {int(c) for c in classes if isinstance(c, (int, np.integer))})
    return table


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


def _apportion(total: int, shares: np.ndarray) -> np.ndarray:
    """Cut ``total`` into integer parts proportional to ``shares`` by largest remainder (ties to the earlier part).

    Args:
        total: the non-negative integer to cut.
        shares: non-negative weights with a positive sum, shape ``(P,)``.

    Returns:
        ``int64`` part sizes of shape ``(P,)`` that add up to ``total``.

    """
    exact = shares / shares.sum() * total
    sizes: np.ndarray = np.floor(exact).astype(np.int64)
    leftover = total - int(sizes.sum())
    sizes[np.argsort(-(exact - sizes), kind="stable")[:leftover]] += 1
    return sizes
