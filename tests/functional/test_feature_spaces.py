from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from fedhet.functional import add_noise_features, prune_features, random_linear_map, resample_images

FAST = settings(max_examples=25, deadline=None)
seed_strategy = st.integers(min_value=0, max_value=2**31 - 1)


def _features(n: int = 7, d: int = 5, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- added noise features --------------------------------------------------------------------------------------------


@FAST
@given(
    seed=seed_strategy,
    low=st.integers(min_value=0, max_value=5),
    extra=st.integers(min_value=0, max_value=5),
    d=st.integers(min_value=1, max_value=6),
)
def test_noise_features_keep_the_originals_and_append_a_drawn_count(seed, low, extra, d):
    x = _features(d=d)
    noisy, added = add_noise_features(x, seed, min_added=low, max_added=low + extra)
    assert low <= added <= low + extra
    assert noisy.dtype == torch.float32
    assert noisy.shape == (7, d + added)
    torch.testing.assert_close(noisy[:, :d], x.float())
    again, same = add_noise_features(x, seed, min_added=low, max_added=low + extra)
    assert same == added
    torch.testing.assert_close(again, noisy)


def test_noise_features_defaults_follow_flic_and_noise_is_standard_normal():
    counts = {add_noise_features(torch.zeros(1, 5), seed)[1] for seed in range(200)}
    assert counts == set(range(1, 11))  # a_i ~ U{1, ..., 10}
    noisy, added = add_noise_features(torch.zeros(20000, 2), seed=1, min_added=3, max_added=3, noise_std=2.0)
    noise = noisy[:, 2:]
    assert added == 3
    assert abs(float(noise.mean())) < 0.05
    assert float(noise.std()) == pytest.approx(2.0, rel=0.03)
    other, _ = add_noise_features(torch.zeros(4, 2), seed=2, min_added=3, max_added=3)
    assert not torch.equal(other, add_noise_features(torch.zeros(4, 2), seed=3, min_added=3, max_added=3)[0])
    silent, _ = add_noise_features(torch.ones(3, 2), seed=0, noise_std=0.0)
    assert torch.all(silent[:, 2:] == 0)


def test_noise_features_flatten_images():
    noisy, added = add_noise_features(torch.ones(3, 1, 2, 2), seed=0, min_added=2, max_added=2)
    assert noisy.shape == (3, 6)
    assert added == 2


# --- random linear map -----------------------------------------------------------------------------------------------


@FAST
@given(seed=seed_strategy, d=st.integers(min_value=1, max_value=8), low=st.integers(min_value=1, max_value=10))
def test_linear_map_is_x_times_the_drawn_matrix(seed, d, low):
    x = _features(d=d)
    mapped, matrix = random_linear_map(x, seed, min_dim=low, max_dim=low + 5)
    assert matrix.dtype == mapped.dtype == torch.float32
    assert matrix.shape[0] == d
    assert low <= matrix.shape[1] <= low + 5
    assert mapped.shape == (7, matrix.shape[1])
    np.testing.assert_allclose(mapped.numpy(), x.numpy() @ matrix.double().numpy(), rtol=1e-4, atol=1e-4)
    again, same = random_linear_map(x, seed, min_dim=low, max_dim=low + 5)
    torch.testing.assert_close(same, matrix)
    torch.testing.assert_close(again, mapped)


def test_linear_map_defaults_and_entries():
    dims = {random_linear_map(torch.zeros(1, 5), seed)[1].shape[1] for seed in range(400)}
    assert min(dims) >= 3
    assert max(dims) <= 100
    assert len(dims) > 60
    _, matrix = random_linear_map(torch.zeros(1, 200), seed=0, out_dim=100, std=3.0)
    assert matrix.shape == (200, 100)
    assert float(matrix.std()) == pytest.approx(3.0, rel=0.03)
    assert abs(float(matrix.mean())) < 0.05
    image_mapped, image_matrix = random_linear_map(torch.ones(2, 1, 2, 2), seed=0, out_dim=3)
    torch.testing.assert_close(image_mapped, torch.ones(2, 4) @ image_matrix)


# --- pruning ---------------------------------------------------------------------------------------------------------


@FAST
@given(
    seed=seed_strategy,
    d=st.integers(min_value=1, max_value=40),
    fraction=st.floats(min_value=0.0, max_value=0.95),
    permute=st.booleans(),
)
def test_pruning_keeps_a_subset_of_the_original_columns(seed, d, fraction, permute):
    x = _features(d=d)
    pruned, kept = prune_features(x, seed, fraction=fraction, permute=permute)
    assert kept.dtype == torch.int64
    assert len(kept) == d - math.floor(fraction * d + 1e-9)
    assert len(torch.unique(kept)) == len(kept)
    assert set(kept.tolist()) <= set(range(d))
    torch.testing.assert_close(pruned, x.float()[:, kept])
    if not permute:
        assert torch.all(kept[1:] > kept[:-1])
    _, ordered = prune_features(x, seed, fraction=fraction)
    assert sorted(kept.tolist()) == ordered.tolist(), "permuting reorders the same kept columns"


def test_pruning_defaults_drop_ten_percent_and_up_to_draws_the_count():
    pruned, kept = prune_features(torch.ones(2, 64), seed=0)
    assert pruned.shape == (2, 58)
    counts = {len(prune_features(torch.ones(1, 100), seed, up_to=True)[1]) for seed in range(100)}
    assert min(counts) >= 90
    assert max(counts) == 100
    assert len(counts) > 5
    first = prune_features(torch.ones(1, 100), seed=0)[1]
    assert not torch.equal(first, prune_features(torch.ones(1, 100), seed=1)[1])


# --- resampling ------------------------------------------------------------------------------------------------------


@FAST
@given(
    value=st.floats(min_value=-5, max_value=5),
    h=st.integers(min_value=1, max_value=12),
    w=st.integers(min_value=1, max_value=12),
    mode=st.sampled_from(["bilinear", "bicubic", "area", "nearest", "nearest-exact"]),
)
def test_resampling_a_constant_image_gives_a_constant_image(value, h, w, mode):
    images = torch.full((2, 3, 8, 6), value)
    resized = resample_images(images, (h, w), mode=mode)
    assert resized.shape == (2, 3, h, w)
    assert resized.dtype == torch.float32
    torch.testing.assert_close(resized, torch.full_like(resized, value), atol=1e-4, rtol=1e-4)


def test_bilinear_halving_averages_two_by_two_tiles_and_same_size_is_identity():
    images = torch.rand(4, 2, 8, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(resample_images(images, 4), F.avg_pool2d(images, 2))
    torch.testing.assert_close(resample_images(images, 4, mode="area"), F.avg_pool2d(images, 2))
    torch.testing.assert_close(resample_images(images, (8, 8)), images)
    doubled = resample_images(images, 16, mode="nearest")
    torch.testing.assert_close(doubled[..., ::2, ::2], images)


def test_flat_input_round_trips_through_the_image_shape():
    images = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    flat = resample_images(images.flatten(1), (4, 4), image_shape=(8, 8))
    assert flat.shape == (3, 16)
    torch.testing.assert_close(flat, resample_images(images, 4).flatten(1))
    colour = torch.rand(2, 3 * 4 * 4)
    assert resample_images(colour, 2, image_shape=(3, 4, 4)).shape == (2, 12)
    smooth = resample_images(images, 4, antialias=True)
    assert smooth.shape == (3, 1, 4, 4)


# --- bad arguments ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: add_noise_features(torch.ones(2, 2), 0, min_added=-1), "min_added"),
        (lambda: add_noise_features(torch.ones(2, 2), 0, min_added=3, max_added=2), "max_added"),
        (lambda: add_noise_features(torch.ones(2, 2), 0, noise_std=-1.0), "noise_std"),
        (lambda: add_noise_features(torch.ones(2), 0), "`x`"),
        (lambda: random_linear_map(torch.ones(2, 2), 0, min_dim=0), "min_dim"),
        (lambda: random_linear_map(torch.ones(2, 2), 0, min_dim=5, max_dim=4), "max_dim"),
        (lambda: random_linear_map(torch.ones(2, 2), 0, out_dim=0), "out_dim"),
        (lambda: random_linear_map(torch.ones(2, 2), 0, std=0.0), "std"),
        (lambda: prune_features(torch.ones(2, 2), 0, fraction=1.0), "fraction"),
        (lambda: prune_features(torch.ones(2, 2), 0, fraction=-0.1), "fraction"),
        (lambda: resample_images(torch.ones(2, 1, 4, 4), 2, mode="lanczos"), "mode"),
        (lambda: resample_images(torch.ones(2, 1, 4, 4), 2, mode="nearest", antialias=True), "antialias"),
        (lambda: resample_images(torch.ones(2, 1, 4, 4), 0), "size"),
        (lambda: resample_images(torch.ones(2, 1, 4, 4), (2, 2, 2)), "size"),
        (lambda: resample_images(torch.ones(2, 16), 2), "image_shape"),
        (lambda: resample_images(torch.ones(2, 15), 2, image_shape=(4, 4)), "image_shape"),
    ],
)
def test_transforms_reject_bad_arguments(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
