"""Class centroids, their aggregation, FedPAC's head statistics and the feature-alignment loss."""

import numpy as np
import pytest
import torch
from torch import nn

from fedhet.functional import (
    aggregate_centroids,
    class_centroids,
    class_feature_sums,
    feature_alignment_losses,
    head_statistics,
)


def data(n, d, k, seed, classes=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) + 1.0
    pool = torch.tensor(classes if classes is not None else list(range(k)))
    y = pool[torch.randint(len(pool), (n,), generator=g)]
    return x, y


def test_centroids_are_class_means_and_absent_rows_zero():
    x, y = data(50, 3, 4, 0, classes=[0, 2])
    centroids, counts = class_centroids(x, y, 4)
    assert counts.tolist() == [float((y == k).sum()) for k in range(4)]
    assert torch.allclose(centroids[2], x[y == 2].mean(0))
    assert torch.equal(centroids[1], torch.zeros(3, dtype=torch.float64))


def test_aggregation_equals_pooled_centroids_with_absent_classes():
    clients = [data(30, 4, 5, 1, [0, 1]), data(20, 4, 5, 2, [1, 2, 3]), data(25, 4, 5, 3, [0, 3])]
    per_client = [class_centroids(x, y, 5) for x, y in clients]
    centroids = torch.stack([c for c, _ in per_client])
    centroids[0, 4] = float("nan")  # an absent class's row must not leak into the aggregate
    global_c, totals = aggregate_centroids(centroids, torch.stack([n for _, n in per_client]))
    pooled, pooled_counts = class_centroids(torch.cat([x for x, _ in clients]), torch.cat([y for _, y in clients]), 5)
    assert torch.allclose(global_c, pooled)
    assert torch.equal(totals, pooled_counts)
    assert totals[4] == 0
    assert torch.equal(global_c[4], torch.zeros(4, dtype=torch.float64))


def test_head_statistics_match_a_numpy_reference():
    x, y = data(80, 6, 4, 5, classes=[0, 1, 3])
    h, v = head_statistics(*class_feature_sums(x, y, 4))
    xn, yn = x.numpy(), y.numpy()
    ref_h, ref_v = np.zeros((4, 6)), 0.0
    for k in range(4):
        members = xn[yn == k]
        if len(members) == 0:
            continue
        prior = len(members) / len(xn)
        mean = members.mean(0)
        ref_h[k] = prior * mean
        ref_v += prior * (members**2).sum(1).mean() - prior**2 * (mean**2).sum()
    assert np.allclose(h.numpy(), ref_h)
    assert np.isclose(float(v), ref_v)
    assert torch.equal(h[2], torch.zeros(6, dtype=torch.float64))
    assert v >= 0


def test_feature_alignment_is_mse_without_centroid_or_head_gradient():
    x, y = data(16, 5, 3, 7)
    head = nn.Linear(5, 3).double()
    features = x.clone().requires_grad_(True)
    centroids = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    loss = feature_alignment_losses(features, y, centroids).mean()
    assert torch.allclose(loss, nn.functional.mse_loss(x, centroids.detach()[y]))
    loss.backward()
    assert centroids.grad is None
    assert head.weight.grad is None
    assert features.grad is not None


def test_feature_alignment_falls_back_for_missing_classes():
    x, y = data(30, 4, 3, 8)
    centroids = torch.randn(3, 4, dtype=torch.float64)
    available = torch.tensor([True, False, True])
    fallback = torch.randn(3, 4, dtype=torch.float64)
    with_fallback = feature_alignment_losses(x, y, centroids, available, fallback).mean()
    targets = torch.where(available[:, None], centroids, fallback)
    assert torch.allclose(with_fallback, nn.functional.mse_loss(x, targets[y]))


def test_per_sample_alignment_terms_are_squared_distances_whose_mean_is_the_loss():
    x, y = data(20, 4, 3, 9)
    centroids = torch.randn(3, 4, dtype=torch.float64)
    available = torch.tensor([True, False, True])
    fallback = torch.randn(3, 4, dtype=torch.float64)
    terms = feature_alignment_losses(x, y, centroids, available, fallback)
    targets = np.where(available.numpy()[:, None], centroids.numpy(), fallback.numpy())
    expected = ((x.numpy() - targets[y.numpy()]) ** 2).mean(axis=1)  # (1/d) ||f(x_l) - c_{y_l}||^2, by hand
    np.testing.assert_allclose(terms.numpy(), expected, rtol=1e-12)


def test_per_sample_alignment_needs_a_fallback_when_classes_are_missing():
    x, y = data(8, 4, 3, 10)
    with pytest.raises(ValueError, match="'available' needs a 'fallback'"):
        feature_alignment_losses(x, y, torch.zeros(3, 4, dtype=torch.float64), torch.tensor([True, False, True]))
