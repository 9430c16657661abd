from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedhet.functional import (
    dirichlet_label_skew,
    dominant_class_sets,
    dominant_class_skew,
    grid_blocks,
    hybrid_partition,
    permute_labels_by_group,
    quantity_skew,
    shard_label_skew,
    split_indices,
)

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


# --- pathological shards: c classes per client ---------------------------------------------------------------------


@st.composite
def shard_cases(draw):
    num_classes = draw(st.integers(min_value=1, max_value=6))
    num_clients = draw(st.integers(min_value=1, max_value=7))
    per_client = draw(st.integers(min_value=1, max_value=num_classes))
    sizes = draw(
        st.lists(
            st.integers(min_value=num_clients, max_value=num_clients + 12), min_size=num_classes, max_size=num_classes
        )
    )
    values = draw(st.permutations(list(range(0, 3 * num_classes, 3))))[:num_classes]  # arbitrary label values
    labels = np.repeat(np.array(values), sizes)
    return labels, num_clients, per_client


@FAST
@given(case=shard_cases(), seed=seed_strategy)
def test_shards_give_exactly_c_classes_evenly_split_and_disjoint(case, seed):
    labels, num_clients, per_client = case
    parts = shard_label_skew(labels, num_clients, per_client, seed)
    assert len(parts) == num_clients
    for part in parts:
        assert part.dtype == np.int64
        assert np.all(np.diff(part) > 0)
        assert len(np.unique(labels[part])) == per_client
    everything = np.concatenate(parts)
    assert len(np.unique(everything)) == len(everything), "disjoint"
    classes = np.unique(labels)
    holders = {value: [i for i, part in enumerate(parts) if value in labels[part]] for value in classes}
    counts = [len(h) for h in holders.values()]
    assert max(counts) - min(counts) <= 1, "classes are held by balanced numbers of clients"
    held = [value for value, h in holders.items() if h]
    np.testing.assert_array_equal(np.sort(everything), np.flatnonzero(np.isin(labels, held)))
    if num_clients * per_client >= len(classes):
        _assert_partition_of_range(parts, len(labels))
    for value, clients in holders.items():
        shares = [int(np.sum(labels[parts[i]] == value)) for i in clients]
        assert not shares or max(shares) - min(shares) <= 1, "a class is split evenly among its holders"
    for a, b in zip(parts, shard_label_skew(torch.from_numpy(labels), num_clients, per_client, seed), strict=True):
        np.testing.assert_array_equal(a, b)


def test_shards_per_client_counts_and_seed_dependence():
    labels = np.repeat(np.arange(8), 30)
    parts = shard_label_skew(labels, 5, [3, 3, 5, 5, 8], seed=0)
    assert [len(np.unique(labels[p])) for p in parts] == [3, 3, 5, 5, 8]
    _assert_partition_of_range(parts, len(labels))
    other = shard_label_skew(labels, 5, [3, 3, 5, 5, 8], seed=1)
    assert any(not np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"num_clients": 0}, "num_clients"),
        ({"classes_per_client": 0}, "classes_per_client"),
        ({"classes_per_client": 4}, "classes_per_client"),
        ({"classes_per_client": [1, 2, 3]}, "classes_per_client"),
        ({"classes_per_client": 1.5}, "classes_per_client"),
        ({"num_clients": 30, "classes_per_client": 3}, "labels"),
        ({"labels": np.zeros((3, 2), dtype=int)}, "labels"),
        ({"labels": np.array([0.5, 1.0])}, "labels"),
    ],
)
def test_shards_reject_bad_arguments(kwargs, argument):
    arguments = {"labels": np.repeat(np.arange(3), 10), "num_clients": 2, "classes_per_client": 2, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=argument):
        shard_label_skew(**arguments)


# --- FedPAC: s% uniform + dominant classes of the client's group ----------------------------------------------------


def _expected_fedpac_histogram(n, s, num_classes, dominant):
    """The per-class counts of FedPAC's rule, written independently of the library."""
    uniform = int(np.floor(n * s + 1e-9))
    expected = np.full(num_classes, uniform // num_classes)
    expected[num_classes - 1] += uniform % num_classes
    rest = n - uniform
    for value in dominant:
        expected[value] += rest // len(dominant)
    expected[dominant[-1]] += rest % len(dominant)
    return expected


def test_fedpac_default_histogram_matches_the_paper():
    labels = np.repeat(np.arange(10), 1600)
    parts = dominant_class_skew(labels, num_clients=20, samples_per_client=600, seed=2022)
    assert dominant_class_sets(10) == [(0, 1, 2), (2, 3, 4), (4, 5, 6), (6, 7, 8), (8, 9, 0)]
    for client, part in enumerate(parts):
        histogram = np.bincount(labels[part], minlength=10)
        dominant = dominant_class_sets(10)[client % 5]
        assert sorted(histogram.tolist()) == [12] * 7 + [172] * 3
        assert set(np.flatnonzero(histogram == 172)) == set(dominant), "groups are interleaved: i mod 5"
        assert histogram[list(dominant)].sum() - 3 * 12 == 480  # (1 - s) of 600
    everything = np.concatenate(parts)
    assert len(np.unique(everything)) == len(everything) == 20 * 600


@FAST
@given(
    n=st.integers(min_value=1, max_value=80),
    s=st.floats(min_value=0.0, max_value=1.0),
    num_classes=st.integers(min_value=2, max_value=7),
    num_groups=st.integers(min_value=1, max_value=4),
    data=st.data(),
    seed=seed_strategy,
)
def test_fedpac_counts_follow_the_rule_exactly(n, s, num_classes, num_groups, data, seed):
    width = data.draw(st.integers(min_value=1, max_value=num_classes))
    num_clients = data.draw(st.integers(min_value=1, max_value=6))
    labels = np.repeat(np.arange(num_classes), 6 * 80)
    parts = dominant_class_skew(
        labels, num_clients, n, seed, uniform_fraction=s, num_groups=num_groups, classes_per_group=width
    )
    sets = dominant_class_sets(num_classes, num_groups, width)
    for client, part in enumerate(parts):
        np.testing.assert_array_equal(
            np.bincount(labels[part], minlength=num_classes),
            _expected_fedpac_histogram(n, s, num_classes, sets[client % num_groups]),
        )
    everything = np.concatenate(parts)
    assert len(np.unique(everything)) == len(everything), "disjoint without reuse"
    for a, b in zip(
        parts,
        dominant_class_skew(
            labels, num_clients, n, seed, uniform_fraction=s, num_groups=num_groups, classes_per_group=width
        ),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


def test_fedpac_explicit_groups_and_per_client_sizes():
    labels = np.repeat(np.arange(6), 100)
    groups = [[0, 1], [2, 3, 4, 5]]
    parts = dominant_class_skew(labels, 4, [30, 60, 120, 60], seed=0, uniform_fraction=0.0, dominant_classes=groups)
    assert [len(p) for p in parts] == [30, 60, 120, 60]
    assert set(labels[parts[0]]) == {0, 1}
    assert set(labels[parts[1]]) == {2, 3, 4, 5}
    np.testing.assert_array_equal(np.bincount(labels[parts[3]], minlength=6), [0, 0, 15, 15, 15, 15])


def test_fedpac_running_out_is_refused_unless_reuse_wraps_around():
    labels = np.repeat(np.arange(10), 30)
    with pytest.raises(ValueError, match="allow_reuse"):
        dominant_class_skew(labels, num_clients=10, samples_per_client=60, seed=0)
    parts = dominant_class_skew(labels, num_clients=10, samples_per_client=60, seed=0, allow_reuse=True)
    for client, part in enumerate(parts):
        assert len(part) == 60
        np.testing.assert_array_equal(
            np.bincount(labels[part], minlength=10),
            _expected_fedpac_histogram(60, 0.2, 10, dominant_class_sets(10)[client % 5]),
        )
    everything = np.concatenate(parts)
    assert len(np.unique(everything)) < len(everything), "wrapped-around samples are shared"
    assert set(everything) <= set(range(len(labels)))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"num_clients": 0}, "num_clients"),
        ({"samples_per_client": 0}, "samples_per_client"),
        ({"samples_per_client": [10, 10]}, "samples_per_client"),
        ({"uniform_fraction": 1.5}, "uniform_fraction"),
        ({"num_groups": 0}, "num_groups"),
        ({"classes_per_group": 11}, "classes_per_group"),
        ({"dominant_classes": [[0, 10]]}, "dominant_classes"),
        ({"dominant_classes": [[1, 1]]}, "dominant_classes"),
        ({"dominant_classes": []}, "dominant_classes"),
        ({"num_classes": 5}, "labels"),
        ({"labels": np.repeat(np.arange(10), 100) - 1}, "labels"),
    ],
)
def test_fedpac_rejects_bad_arguments(kwargs, argument):
    arguments = {"labels": np.repeat(np.arange(10), 100), "num_clients": 3, "samples_per_client": 20, "seed": 0}
    with pytest.raises(ValueError, match=argument):
        dominant_class_skew(**(arguments | kwargs))


# --- quantity skew ---------------------------------------------------------------------------------------------------


@FAST
@given(
    n=st.integers(min_value=0, max_value=300),
    num_clients=st.integers(min_value=1, max_value=10),
    distribution=st.sampled_from(["power_law", "dirichlet"]),
    data=st.data(),
    seed=seed_strategy,
)
def test_quantity_skew_covers_with_min_sizes(n, num_clients, distribution, data, seed):
    min_samples = data.draw(st.integers(min_value=0, max_value=n // num_clients))
    parameter = data.draw(st.floats(min_value=0.05, max_value=10.0))
    kwargs = {"exponent": parameter} if distribution == "power_law" else {"alpha": parameter}
    parts = quantity_skew(n, num_clients, seed, distribution=distribution, min_samples=min_samples, **kwargs)
    assert len(parts) == num_clients
    _assert_partition_of_range(parts, n)
    assert min(len(p) for p in parts) >= min_samples
    again = quantity_skew(n, num_clients, seed, distribution=distribution, min_samples=min_samples, **kwargs)
    for a, b in zip(parts, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_quantity_skew_parameters_control_the_spread():
    def spread(**kwargs):
        return np.mean([np.std([len(p) for p in quantity_skew(2000, 10, s, **kwargs)]) for s in range(10)])

    assert spread(distribution="dirichlet", alpha=0.3) > 3 * spread(distribution="dirichlet", alpha=100.0)
    assert spread(distribution="power_law", exponent=0.8) > spread(distribution="power_law", exponent=8.0)
    assert quantity_skew(20, 3, seed=0)[0].tolist() != quantity_skew(20, 3, seed=1)[0].tolist()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"num_samples": -1}, "num_samples"),
        ({"num_clients": 0}, "num_clients"),
        ({"min_samples": -1}, "min_samples"),
        ({"min_samples": 11}, "num_clients"),
        ({"distribution": "zipf"}, "distribution"),
        ({"exponent": 0.0}, "exponent"),
        ({"distribution": "dirichlet", "alpha": -1.0}, "alpha"),
    ],
)
def test_quantity_skew_rejects_bad_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        quantity_skew(**({"num_samples": 20, "num_clients": 2, "seed": 0} | kwargs))


# --- concept shift ---------------------------------------------------------------------------------------------------


@FAST
@given(
    labels=labels_strategy,
    data=st.data(),
    seed=seed_strategy,
)
def test_label_permutation_is_the_closed_form(labels, data, seed):
    groups = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(labels), max_size=len(labels))))
    shifted, permutations = permute_labels_by_group(labels, groups, 5, seed)
    assert permutations.shape == (groups.max() + 1, 5)
    for row in permutations:
        np.testing.assert_array_equal(np.sort(row), np.arange(5))
    np.testing.assert_array_equal(shifted, permutations[groups, labels])
    assert shifted.dtype == np.int64
    again, same = permute_labels_by_group(torch.from_numpy(labels), torch.from_numpy(groups), 5, seed)
    np.testing.assert_array_equal(again, shifted)
    np.testing.assert_array_equal(same, permutations)


def test_label_permutation_depends_only_on_seed_and_group():
    labels = np.arange(10)
    _, few = permute_labels_by_group(labels, np.zeros(10, dtype=int), 10, seed=4, num_groups=3)
    _, many = permute_labels_by_group(labels, np.arange(10) % 3, 10, seed=4)
    np.testing.assert_array_equal(few, many)
    assert not np.array_equal(many[0], many[1])
    empty, none = permute_labels_by_group(np.array([], dtype=int), np.array([], dtype=int), 4, seed=0)
    assert empty.shape == (0,)
    assert none.shape == (0, 4)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"groups": np.zeros(3, dtype=int)}, "groups"),
        ({"groups": -np.ones(4, dtype=int)}, "groups"),
        ({"num_classes": 0}, "num_classes"),
        ({"num_classes": 2}, "labels"),
        ({"num_groups": 1, "groups": np.array([0, 1, 0, 1])}, "num_groups"),
    ],
)
def test_label_permutation_rejects_bad_arguments(kwargs, argument):
    arguments = {"labels": np.array([0, 1, 2, 3]), "groups": np.zeros(4, dtype=int), "num_classes": 4, "seed": 0}
    with pytest.raises(ValueError, match=argument):
        permute_labels_by_group(**(arguments | kwargs))


# --- hybrid feature-block x class partition (HyFEM) ------------------------------------------------------------------

HYFEM_TABLE_4 = {  # HyFEM appendix C.1, table 4, 0-based: blocks TL, TR, BL, BR = "0".."3"; classes 1-5 -> 0-4
    "client_1": {"blocks": [0, 1, 2], "classes": [0, 1, 2, 3, 4]},
    "client_2": {"blocks": [0, 1, 2], "classes": [5, 6, 7, 8, 9]},
    "client_3": {"blocks": [0, 2, 3], "classes": [0, 1, 2, 3, 4]},
    "client_4": {"blocks": [0, 2, 3], "classes": [5, 6, 7, 8, 9]},
    "client_5": {"blocks": [0, 2], "classes": [0, 1, 2, 3, 4]},
    "client_6": {"blocks": [0, 2], "classes": [5, 6, 7, 8, 9]},
}


def test_hyfem_table_4_gives_every_client_all_samples_of_its_classes_on_its_blocks():
    labels = np.arange(200) % 10
    blocks = grid_blocks((8, 8), (2, 2))
    split = hybrid_partition(labels, HYFEM_TABLE_4, blocks, seed=0)
    assert list(split.indices) == list(HYFEM_TABLE_4)
    for client, entry in HYFEM_TABLE_4.items():
        np.testing.assert_array_equal(split.indices[client], np.flatnonzero(np.isin(labels, entry["classes"])))
        names = [str(b) for b in entry["blocks"]]
        np.testing.assert_array_equal(split.columns[client], np.concatenate([blocks[n] for n in names]))
        assert split.feature_blocks[client] == dict.fromkeys(names, 16)
    for value in range(10):  # per class, blocks 1..4 held by 3, 1, 3, 1 clients (the paper's figure 12b)
        holders = [sum(value in e["classes"] and b in e["blocks"] for e in HYFEM_TABLE_4.values()) for b in range(4)]
        assert holders == [3, 1, 3, 1]
    assert split.unheld.size == 0
    assert split.uncovered_cells == ()
    assert split.unused_fraction == 0.0


def test_hyfem_modelnet40_1_table_reproduces_the_block_counts():
    table = {
        "A": {"blocks": [0, 1, 2], "classes": list(range(10, 30))},
        "B": {"blocks": [0, 1, 3], "classes": list(range(20, 40))},
        "C": {"blocks": [0, 2, 3], "classes": list(range(0, 10)) + list(range(30, 40))},
        "D": {"blocks": [1, 2, 3], "classes": list(range(0, 20))},
    }
    labels = np.arange(400) % 40
    split = hybrid_partition(labels, table, {b: [b] for b in range(4)}, seed=0)
    for first, expected in ((0, (1, 1, 2, 2)), (10, (1, 2, 2, 1)), (20, (2, 2, 1, 1)), (30, (2, 1, 1, 2))):
        rows = np.flatnonzero(labels == first)
        counts = tuple(
            sum(np.isin(rows, split.indices[c]).all() and b in split.columns[c] for c in table) for b in range(4)
        )
        assert counts == expected
    assert all(len(rows) == 200 for rows in split.indices.values())


def test_hybrid_splits_cells_shared_by_clients_with_the_same_blocks():
    labels = np.repeat([0, 1, 2], [10, 11, 5])
    table = {"a": {"blocks": ["x"], "classes": [0, 1]}, "b": {"blocks": ["x"], "classes": [1]}}
    blocks = {"x": [0, 1], "y": [2]}
    split = hybrid_partition(labels, table, blocks, seed=3)
    ones = np.flatnonzero(labels == 1)
    a_ones = np.intersect1d(split.indices["a"], ones)
    b_ones = np.intersect1d(split.indices["b"], ones)
    assert {len(a_ones), len(b_ones)} == {5, 6}
    np.testing.assert_array_equal(np.sort(np.concatenate([a_ones, b_ones])), ones)
    np.testing.assert_array_equal(split.unheld, np.flatnonzero(labels == 2))
    assert split.uncovered_cells == (("x", 2), ("y", 0), ("y", 1), ("y", 2))
    assert split.unused_fraction == pytest.approx((5 * 2 + 26 * 1) / (26 * 3))
    together = hybrid_partition(labels, table, blocks, seed=3, split_shared=False)
    np.testing.assert_array_equal(np.intersect1d(together.indices["b"], ones), ones)
    np.testing.assert_array_equal(np.intersect1d(together.indices["a"], ones), ones)


@FAST
@given(data=st.data(), seed=seed_strategy)
def test_hybrid_property_cells_are_covered_once_and_unheld_is_the_rest(data, seed):
    num_classes, num_blocks = 4, 3
    extra = data.draw(st.lists(st.integers(0, num_classes - 1), max_size=30))
    labels = np.concatenate([np.repeat(np.arange(num_classes), 5), extra]).astype(np.int64)  # >= 5 per class
    num_clients = data.draw(st.integers(1, 5))
    table = {}
    for client in range(num_clients):
        client_blocks = data.draw(
            st.lists(st.integers(0, num_blocks - 1), min_size=1, max_size=num_blocks, unique=True)
        )
        classes = data.draw(st.lists(st.integers(0, num_classes - 1), min_size=1, max_size=num_classes, unique=True))
        table[f"c{client}"] = {"blocks": client_blocks, "classes": classes}
    block_columns = {b: [2 * b, 2 * b + 1] for b in range(num_blocks)}
    split = hybrid_partition(labels, table, block_columns, seed)
    held = set()
    for client, entry in table.items():
        assert set(labels[split.indices[client]]) <= set(entry["classes"])
        held |= set(split.indices[client].tolist())
    assert held.isdisjoint(split.unheld.tolist())
    assert held | set(split.unheld.tolist()) == set(range(len(labels)))
    cells = {}
    for client, entry in table.items():
        for value in entry["classes"]:
            cells.setdefault((frozenset(entry["blocks"]), value), []).append(client)
    for (_, value), clients in cells.items():
        pieces = [np.intersect1d(split.indices[c], np.flatnonzero(labels == value)) for c in clients]
        joined = np.concatenate(pieces)
        np.testing.assert_array_equal(np.sort(joined), np.flatnonzero(labels == value))  # covered exactly once
    again = hybrid_partition(labels, table, block_columns, seed)
    for client in table:
        np.testing.assert_array_equal(split.indices[client], again.indices[client])


@pytest.mark.parametrize(
    ("assignment", "blocks", "argument"),
    [
        ({}, {"x": [0]}, "assignment"),
        ({"a": {"blocks": ["x"]}}, {"x": [0]}, "assignment"),
        ({"a": {"blocks": ["z"], "classes": [0]}}, {"x": [0]}, "unknown blocks"),
        ({"a": {"blocks": [], "classes": [0]}}, {"x": [0]}, "assignment"),
        ({"a": {"blocks": ["x"], "classes": [0, 0]}}, {"x": [0]}, "assignment"),
        ({"a": {"blocks": ["x"], "classes": [7]}}, {"x": [0]}, "no samples"),
        ({"a": {"blocks": ["x"], "classes": [0]}}, {"x": [0, 1], "y": [1]}, "block_columns"),
        ({"a": {"blocks": ["x"], "classes": [0]}}, {"x": []}, "block_columns"),
        ({"a": {"blocks": ["x"], "classes": [0]}}, {}, "block_columns"),
    ],
)
def test_hybrid_rejects_bad_tables(assignment, blocks, argument):
    with pytest.raises(ValueError, match=argument):
        hybrid_partition(np.array([0, 1, 0]), assignment, blocks, seed=0)


def test_grid_blocks_tile_the_image_quadrant_major():
    blocks = grid_blocks((3, 32, 32), (2, 2), split_channels=True)
    assert len(blocks) == 12
    np.testing.assert_array_equal(np.sort(np.concatenate(list(blocks.values()))), np.arange(3 * 32 * 32))
    image = np.arange(3 * 32 * 32).reshape(3, 32, 32)
    for b, columns in blocks.items():
        quadrant, channel = int(b) // 3, int(b) % 3
        rows, cols = divmod(quadrant, 2)
        np.testing.assert_array_equal(
            columns, np.sort(image[channel, 16 * rows : 16 * rows + 16, 16 * cols : 16 * cols + 16].ravel())
        )
    assert grid_blocks((8, 8), (2, 2))["3"].tolist() == [36, 37, 38, 39, 44, 45, 46, 47, 52, 53, 54, 55, 60, 61, 62, 63]
    for shape, grid in (((8, 8), (3, 2)), ((8,), (2, 2)), ((8, 8), (2,))):
        with pytest.raises(ValueError, match="grid|image_shape"):
            grid_blocks(shape, grid)
