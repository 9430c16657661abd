"""Seeded stratified splits: each class cut in the given fractions, a plain split where classes are too small."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedhet.functional import split_indices, stratified_split_indices


def test_each_class_is_cut_in_the_fractions_by_largest_remainder():
    labels = np.array([0] * 50 + [1] * 30 + [2] * 20)
    parts = stratified_split_indices(labels, [0.7, 0.1, 0.2], seed=0)
    counts = [np.bincount(labels[part], minlength=3).tolist() for part in parts]
    assert counts == [[35, 21, 14], [5, 3, 2], [10, 6, 4]]


def test_classes_too_small_to_stratify_give_the_plain_split():
    labels = np.arange(10)  # ten singleton classes: every row would go to the first part
    parts = stratified_split_indices(labels, [0.8, 0.2], seed=1)
    assert [p.tolist() for p in parts] == [p.tolist() for p in split_indices(10, [0.8, 0.2], seed=1)]


@settings(max_examples=50, deadline=None)
@given(
    labels=st.lists(st.integers(0, 3), min_size=0, max_size=60),
    test=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**31),
)
def test_parts_are_sorted_disjoint_and_cover_every_row(labels, test, seed):
    parts = stratified_split_indices(np.array(labels, dtype=np.int64), [1 - test, test], seed)
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(len(labels)))
    assert all(np.array_equal(part, np.sort(part)) and part.dtype == np.int64 for part in parts)
