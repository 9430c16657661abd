from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedhet.functional import dirichlet_label_skew, split_indices

FAST = settings(max_examples=30, deadline=None)

labels_strategy = st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=60).map(np.array)
alpha_strategy = st.floats(min_value=0.05, max_value=20.0)
seed_strategy = st.integers(min_value=0, max_value=2**31 - 1)


def _assert_partition_of_range(parts: list[np.ndarray], n: int) -> None:
    for part in parts:
        assert part.dtype == np.int64
        assert np.all(np.diff(part) > 0), "each part is sorted and holds no index twice"
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def _mean_label_entropy(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    entropies = []
    for part in parts:
        p = np.bincount(labels[part], minlength=labels.max() + 1) / len(part)
        p = p[p > 0]
        entropies.append(-(p * np.log(p)).sum())
    return float(np.mean(entropies))


@FAST
@given(labels=labels_strategy, data=st.data(), alpha=alpha_strategy, seed=seed_strategy)
def test_dirichlet_parts_are_disjoint_and_cover_every_index(labels, data, alpha, seed):
    num_clients = data.draw(st.integers(min_value=1, max_value=8))
    parts = dirichlet_label_skew(labels, num_clients, alpha, seed, min_samples=0)
    assert len(parts) == num_clients
    _assert_partition_of_range(parts, len(labels))


@FAST
@given(labels=labels_strategy, data=st.data(), alpha=alpha_strategy, seed=seed_strategy)
def test_dirichlet_same_seed_same_parts_and_tensor_input_agrees(labels, data, alpha, seed):
    num_clients = data.draw(st.integers(min_value=1, max_value=len(labels)))
    first = dirichlet_label_skew(labels, num_clients, alpha, seed, min_samples=0)
    again = dirichlet_label_skew(torch.from_numpy(labels), num_clients, alpha, seed, min_samples=0)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_dirichlet_different_seeds_give_different_parts():
    labels = np.arange(200) % 5
    first = dirichlet_label_skew(labels, 4, alpha=0.5, seed=0)
    other = dirichlet_label_skew(labels, 4, alpha=0.5, seed=1)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other, strict=True))


@FAST
@given(labels=labels_strategy, data=st.data(), alpha=alpha_strategy, seed=seed_strategy)
def test_dirichlet_min_samples_is_honoured_or_refused(labels, data, alpha, seed):
    num_clients = data.draw(st.integers(min_value=1, max_value=4))
    min_samples = data.draw(st.integers(min_value=1, max_value=max(1, len(labels) // num_clients)))
    refusal = None
    try:
        parts = dirichlet_label_skew(labels, num_clients, alpha, seed, min_samples=min_samples, max_retries=20)
    except ValueError as error:
        refusal = str(error)
    if refusal is not None:
        assert f"at least {min_samples} samples" in refusal
        return
    assert min(len(part) for part in parts) >= min_samples
    _assert_partition_of_range(parts, len(labels))


def test_dirichlet_min_samples_met_on_a_realistic_case():
    labels = np.arange(1000) % 10
    parts = dirichlet_label_skew(labels, 20, alpha=0.3, seed=7, min_samples=20)
    assert min(len(part) for part in parts) >= 20
    _assert_partition_of_range(parts, 1000)


def test_smaller_alpha_gives_more_label_skew():
    labels = np.arange(600) % 6
    seeds = range(10)
    skewed = np.mean([_mean_label_entropy(labels, dirichlet_label_skew(labels, 5, 0.1, s)) for s in seeds])
    uniform = np.mean([_mean_label_entropy(labels, dirichlet_label_skew(labels, 5, 100.0, s)) for s in seeds])
    assert skewed < uniform - 0.5
    assert uniform > 0.95 * np.log(6)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"num_clients": 0}, "num_clients"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": float("inf")}, "alpha"),
        ({"min_samples": -1}, "min_samples"),
        ({"max_retries": 0}, "max_retries"),
        ({"labels": np.zeros((4, 2), dtype=int)}, "labels"),
        ({"num_clients": 11, "min_samples": 1}, "num_clients"),
        ({"num_clients": 3, "min_samples": 4}, "num_clients"),
    ],
)
def test_dirichlet_rejects_bad_arguments(kwargs, argument):
    arguments = {"labels": np.arange(10) % 2, "num_clients": 2, "alpha": 1.0, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=argument):
        dirichlet_label_skew(**arguments)


def test_dirichlet_gives_up_after_max_retries():
    with pytest.raises(ValueError, match="in 3 tries"):
        dirichlet_label_skew(np.zeros(100, dtype=int), 2, alpha=0.01, seed=0, min_samples=50, max_retries=3)


@FAST
@given(
    n=st.integers(min_value=0, max_value=200),
    weights=st.lists(st.integers(min_value=0, max_value=10), min_size=1, max_size=4).filter(any),
    seed=seed_strategy,
)
def test_split_indices_sizes_coverage_and_seed_stability(n, weights, seed):
    fractions = [w / sum(weights) for w in weights]
    parts = split_indices(n, fractions, seed)
    assert len(parts) == len(fractions)
    _assert_partition_of_range(parts, n)
    for part, fraction in zip(parts, fractions, strict=True):
        assert abs(len(part) - fraction * n) < 1
    for a, b in zip(parts, split_indices(n, fractions, seed), strict=True):
        np.testing.assert_array_equal(a, b)


def test_split_indices_differs_across_seeds_and_rounds_towards_earlier_parts():
    assert not np.array_equal(split_indices(50, [0.5, 0.5], 0)[0], split_indices(50, [0.5, 0.5], 1)[0])
    assert [len(part) for part in split_indices(10, [0.75, 0.0, 0.25], 0)] == [8, 0, 2]


@pytest.mark.parametrize(
    ("n", "fractions", "match"),
    [
        (-1, [1.0], "`n`"),
        (10, [], "fractions"),
        (10, [0.5, 0.4], "sum to 1"),
        (10, [1.5, -0.5], "non-negative"),
        (10, [float("nan"), 1.0], "fractions"),
    ],
)
def test_split_indices_rejects_bad_arguments(n, fractions, match):
    with pytest.raises(ValueError, match=match):
        split_indices(n, fractions, seed=0)
