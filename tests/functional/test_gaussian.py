"""Gaussian W2, Bures, class moments and barycenters against POT, closed forms and finite differences."""

import numpy as np
import ot
import pytest
import torch

from fedhet.functional import (
    bures_sq,
    class_moments,
    gaussian_barycenter,
    gaussian_w2_sq,
    psd_sqrt,
    regression_anchor_means,
)


def random_spd(k, seed, rank=None):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(k, rank or k, generator=g, dtype=torch.float64)
    return a @ a.T + (0 if rank else 0.1) * torch.eye(k, dtype=torch.float64)


@pytest.mark.parametrize("k", [1, 3, 8])
def test_w2_matches_pot_for_full_covariances(k):
    g = torch.Generator().manual_seed(k)
    m1, m2 = torch.randn(k, generator=g, dtype=torch.float64), torch.randn(k, generator=g, dtype=torch.float64)
    s1, s2 = random_spd(k, 1), random_spd(k, 2)
    ours = gaussian_w2_sq(m1, psd_sqrt(s1), m2, s2)
    pot = ot.gaussian.bures_wasserstein_distance(m1.numpy(), m2.numpy(), s1.numpy(), s2.numpy()) ** 2
    assert float(ours) == pytest.approx(float(pot), rel=1e-6, abs=1e-8)
    # a Cholesky factor is as good as the symmetric root, and the distance is symmetric
    assert float(gaussian_w2_sq(m1, torch.linalg.cholesky(s1), m2, s2)) == pytest.approx(float(ours), rel=1e-8)
    assert float(gaussian_w2_sq(m2, psd_sqrt(s2), m1, s1)) == pytest.approx(float(ours), rel=1e-6)


def test_w2_is_batched_and_matches_pot_per_pair():
    g = torch.Generator().manual_seed(0)
    means1, means2 = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    covs1 = torch.stack([random_spd(5, s) for s in range(4)]).float()
    covs2 = torch.stack([random_spd(5, 10 + s) for s in range(4)]).float()  # POT gives NaN on singular ones
    ours = gaussian_w2_sq(means1, psd_sqrt(covs1), means2, covs2)
    assert ours.shape == (4,)
    assert ours.dtype == torch.float32
    for i in range(4):
        pot = ot.gaussian.bures_wasserstein_distance(
            means1[i].double().numpy(), means2[i].double().numpy(), covs1[i].double().numpy(), covs2[i].double().numpy()
        )
        assert float(ours[i]) == pytest.approx(float(pot) ** 2, rel=1e-4, abs=1e-5)


def test_w2_closed_forms():
    k = 4
    s = torch.diag(torch.tensor([0.25, 1.0, 4.0, 9.0], dtype=torch.float64))
    v, m = torch.ones(k, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)
    # identity anchor: ||v - m||^2 + ||S^{1/2} - I||_F^2
    expected = k + ((s.diagonal().sqrt() - 1) ** 2).sum()
    assert float(gaussian_w2_sq(v, None, m, s)) == pytest.approx(float(expected), rel=1e-9)
    # commuting covariances: the Bures term is ||Sigma^{1/2} - S^{1/2}||_F^2
    sigma = torch.diag(torch.tensor([1.0, 2.0, 0.5, 3.0], dtype=torch.float64))
    expected = ((sigma.diagonal().sqrt() - s.diagonal().sqrt()) ** 2).sum()
    assert float(bures_sq(sigma.sqrt(), s)) == pytest.approx(float(expected), rel=1e-9)
    # scaled identity s I: k s + Tr S - 2 sqrt(s) sum sqrt(lambda(S))
    scale = float(np.e)
    expected = k * scale + s.trace() - 2 * scale**0.5 * s.diagonal().sqrt().sum()
    assert float(bures_sq(scale**0.5 * torch.eye(k, dtype=torch.float64), s)) == pytest.approx(float(expected))
    # a Gaussian is at distance 0 from itself, also when its covariance is singular
    low = random_spd(6, 3, rank=2)
    assert abs(float(gaussian_w2_sq(v[:1].repeat(6), psd_sqrt(low), v[:1].repeat(6), low))) < 1e-6


def test_class_moments_match_numpy():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(30, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (30,), generator=g)
    y[0] = 3  # class 3 has one sample: zero covariance
    y[y == 2] = 0  # class 2 is absent
    counts, means, covs = class_moments(z, y, 5)
    for c in range(5):
        rows = z[y == c].numpy()
        assert counts[c] == len(rows)
        if len(rows):
            assert np.allclose(means[c].numpy(), rows.mean(0))
        if len(rows) >= 2:
            assert np.allclose(covs[c].numpy(), np.cov(rows, rowvar=False))
        else:
            assert torch.count_nonzero(covs[c]) == 0
    assert torch.count_nonzero(means[2]) == 0
    assert torch.count_nonzero(means[4]) == 0


def test_gradients_match_finite_differences():
    """Through the batch moments and the closed form, with a learned anchor factor, in float64."""
    g = torch.Generator().manual_seed(0)
    k, n = 3, 9  # n per class > k: full-rank class covariances, where W2 is differentiable
    z = torch.randn(2 * n, k, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.arange(2 * n) % 2
    v = torch.randn(2, k, generator=g, dtype=torch.float64, requires_grad=True)
    factor = (torch.eye(k, dtype=torch.float64) + 0.2 * torch.randn(2, k, k, generator=g, dtype=torch.float64)).tril()
    factor.requires_grad_(True)

    def loss(z, v, factor):
        _, means, covs = class_moments(z, y, 2)
        return gaussian_w2_sq(v, factor, means, covs).sum()

    assert torch.autograd.gradcheck(loss, (z, v, factor), eps=1e-6, atol=1e-5)


def test_gradients_are_finite_on_rank_deficient_covariances():
    """One or a few samples per class in 64 dimensions: singular covariances, finite gradients."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(7, 64, generator=g, requires_grad=True)
    y = torch.tensor([0, 0, 0, 1, 2, 2, 2])
    counts, means, covs = class_moments(z, y, 3)
    w2 = gaussian_w2_sq(torch.zeros(3, 64), torch.eye(64).expand(3, 64, 64), means, covs)
    w2.sum().backward()
    assert torch.isfinite(w2).all()
    assert torch.isfinite(z.grad).all()
    assert z.grad.abs().sum() > 0


def test_barycenter_of_means_is_the_weighted_mean():
    means = torch.randn(5, 3, 4)  # 5 clients, 3 classes
    weights = torch.rand(5, 3)
    weights[:, 2] = 0  # nobody holds class 2: equal weights
    mean, cov = gaussian_barycenter(means, weights)
    assert cov is None
    expected = (weights[..., None] * means).sum(0) / weights.sum(0)[:, None]
    assert torch.allclose(mean[:2], expected[:2], atol=1e-6)
    assert torch.allclose(mean[2], means[:, 2].mean(0), atol=1e-6)


def test_barycenter_of_commuting_covariances_is_closed_form():
    d = torch.rand(4, 5, dtype=torch.float64) + 0.1
    covs = torch.diag_embed(d)
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    _, cov = gaussian_barycenter(torch.zeros(4, 5, dtype=torch.float64), w, covs)
    expected = torch.diag((w[:, None] * d.sqrt()).sum(0) ** 2)
    assert torch.allclose(cov, expected, atol=1e-9)


def test_barycenter_matches_pot_fixed_point():
    covs = torch.stack([random_spd(4, s) for s in range(3)])
    means = torch.randn(3, 4, dtype=torch.float64)
    w = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    mean, cov = gaussian_barycenter(means, w, covs, iterations=200, tol=1e-12)
    pot_mean, pot_cov = ot.gaussian.bures_wasserstein_barycenter(
        means.numpy(), covs.numpy(), weights=w.numpy(), num_iter=1000, eps=1e-12
    )
    assert np.allclose(mean.numpy(), pot_mean)
    assert np.allclose(cov.numpy(), pot_cov, atol=1e-6)
    # per class, batched: (clients, classes, k, k)
    both = torch.stack([covs, covs.flip(0)], 1)
    _, cov2 = gaussian_barycenter(torch.stack([means, means], 1), torch.stack([w, w.flip(0)], 1), both)
    assert torch.allclose(cov2[0], cov, atol=1e-6)
    assert torch.allclose(cov2[1], cov, atol=1e-6)


def test_regression_anchors_reduce_w2_to_a_squared_distance():
    a, b = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    y = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    means = regression_anchor_means(y, a, b)
    assert torch.allclose(means[0], b)
    assert torch.allclose(means[2], a)
    z = torch.randn(3, 5, dtype=torch.float64)
    dirac = torch.zeros(3, 5, 5, dtype=torch.float64)  # one sample: zero covariance
    w2 = gaussian_w2_sq(means, None, z, dirac)
    assert torch.allclose(w2, (z - means).pow(2).sum(-1) + 5)
