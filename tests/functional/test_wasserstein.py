"""Labelled OT and free-support barycenters against POT, closed forms and finite differences; DaDiL's loss pieces."""

import math

import numpy as np
import ot
import pytest
import torch
import torch.nn.functional as F

from fedhet.functional import (
    class_balanced_indices,
    dictionary_loss,
    ensemble_probabilities,
    fit_softmax_regression,
    ground_cost,
    init_dictionary,
    project_simplex,
    transport_plan,
    wasserstein_barycenter,
    wasserstein_cost,
)


def clouds(k, n, d, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, d, generator=g, dtype=dtype) + 3 * i for i in range(k)]


def soft_labels(k, n, c, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.softmax(2 * torch.randn(n, c, generator=g, dtype=dtype), -1) for _ in range(k)]


def sorted_rows(x):
    return x[np.lexsort(x.T.numpy()[::-1].copy())]


@pytest.mark.parametrize("solver", ["emd", "sinkhorn"])
def test_plan_has_uniform_marginals(solver):
    cost = torch.rand(7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    plan = transport_plan(cost, solver, reg=0.05)
    assert plan.shape == (7, 5)
    assert (plan >= 0).all()
    torch.testing.assert_close(plan.sum(1), torch.full((7,), 1 / 7, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(plan.sum(0), torch.full((5,), 1 / 5, dtype=torch.float64), atol=1e-6, rtol=0)


def test_exact_plan_matches_pot_and_sinkhorn_approaches_it():
    x, y = clouds(2, 6, 2)
    cost = ground_cost(x, y)
    exact = float((transport_plan(cost) * cost).sum())
    assert exact == pytest.approx(ot.emd2(np.full(6, 1 / 6), np.full(6, 1 / 6), ot.dist(x.numpy(), y.numpy())))
    smooth = float((transport_plan(cost, "sinkhorn", reg=0.01) * cost).sum())
    assert smooth == pytest.approx(exact, rel=0.05)
    assert smooth >= exact - 1e-9


def test_adaptive_beta_is_the_largest_feature_cost():
    z_p, z_q = clouds(2, 4, 3)
    y_p, y_q = soft_labels(2, 4, 5)
    features = ground_cost(z_p, z_q)
    expected = features + features.max() * torch.cdist(y_p, y_q).pow(2)
    torch.testing.assert_close(ground_cost(z_p, z_q, y_p, y_q), expected)
    torch.testing.assert_close(ground_cost(z_p, z_q, y_p, y_q, beta=0.0), features)


@pytest.mark.parametrize("weights", [[0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [0.1, 0.8, 0.1]])
def test_unlabelled_barycenter_matches_pots_free_support_barycenter(weights):
    atoms = clouds(3, 20, 3)
    alpha = torch.tensor(weights, dtype=torch.float64)
    init = torch.randn(15, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ours, labels = wasserstein_barycenter(atoms, alpha, init=(init, None), n_iter=6, tol=0)
    reference = ot.lp.free_support_barycenter(
        [a.numpy() for a in atoms],
        [np.full(20, 1 / 20)] * 3,
        init.numpy(),
        b=np.full(15, 1 / 15),
        weights=alpha.numpy(),
        numItermax=6,
        stopThr=0.0,
    )
    assert labels is None
    np.testing.assert_allclose(ours.numpy(), reference, atol=1e-10)


def test_labelled_barycenter_is_pots_barycenter_of_label_augmented_points():
    """With a fixed beta, the labelled cost is the squared distance of the points [z, sqrt(beta) y]."""
    atoms_z, atoms_y, beta = clouds(2, 12, 2), soft_labels(2, 12, 3), 4.0
    alpha = torch.tensor([0.35, 0.65], dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    init = (torch.randn(10, 2, dtype=torch.float64, generator=g), torch.softmax(torch.randn(10, 3, generator=g), -1))
    z, y = wasserstein_barycenter(atoms_z, alpha, atoms_y, init=(init[0], init[1].double()), n_iter=5, tol=0, beta=beta)
    augmented = [torch.cat([a, math.sqrt(beta) * b], 1).numpy() for a, b in zip(atoms_z, atoms_y, strict=True)]
    reference = ot.lp.free_support_barycenter(
        augmented,
        [np.full(12, 1 / 12)] * 2,
        torch.cat([init[0], math.sqrt(beta) * init[1].double()], 1).numpy(),
        weights=alpha.numpy(),
        numItermax=5,
        stopThr=0.0,
    )
    np.testing.assert_allclose(torch.cat([z, math.sqrt(beta) * y], 1).numpy(), reference, atol=1e-10)
    torch.testing.assert_close(y.sum(1), torch.ones(10, dtype=torch.float64))  # label rows stay in the simplex
    assert (y >= 0).all()


@pytest.mark.parametrize("vertex", [0, 1, 2])
def test_a_vertex_of_the_simplex_gives_its_atom_back(vertex):
    atoms_z, atoms_y = clouds(3, 16, 4), soft_labels(3, 16, 3)
    alpha = F.one_hot(torch.tensor(vertex), 3).double()
    z, y = wasserstein_barycenter(atoms_z, alpha, atoms_y, n_iter=3, generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(
        sorted_rows(torch.cat([z, y], 1)), sorted_rows(torch.cat([atoms_z[vertex], atoms_y[vertex]], 1)), atol=1e-10
    )
    assert float(wasserstein_cost(z, atoms_z[vertex], y, atoms_y[vertex])) == pytest.approx(0.0, abs=1e-10)


def test_barycenter_of_translates_is_the_weighted_translate():
    base = clouds(1, 10, 2)[0]
    shift = torch.tensor([4.0, -2.0], dtype=torch.float64)
    z, _ = wasserstein_barycenter([base, base + shift], torch.tensor([0.25, 0.75], dtype=torch.float64))
    np.testing.assert_allclose(sorted_rows(z), sorted_rows(base + 0.75 * shift), atol=1e-10)


def test_translating_every_atom_moves_the_unlabelled_loss_by_the_quadratic_identity():
    """Theorem 3.1 for T_2 and uniform weights: f(P + eps) = f(P) + 2 eps.(m_B - m_Q) + |eps|^2."""
    atoms, data = clouds(3, 12, 2), clouds(1, 12, 2, seed=9)[0]
    alpha = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    eps = torch.tensor([0.3, -0.7], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    z, _ = wasserstein_barycenter(atoms, alpha, init=(atoms[0].clone(), None), n_iter=5, generator=g)
    moved, _ = wasserstein_barycenter([a + eps for a in atoms], alpha, init=(atoms[0] + eps, None), n_iter=5)
    before, after = float(wasserstein_cost(data, z)), float(wasserstein_cost(data, moved))
    expected = before + 2 * float(eps @ (z.mean(0) - data.mean(0))) + float(eps @ eps)
    assert after == pytest.approx(expected, rel=1e-9)


def test_loss_gradient_matches_finite_differences_with_plans_frozen():
    atoms_z = torch.stack(clouds(2, 8, 2)).requires_grad_()
    atoms_y = torch.stack(soft_labels(2, 8, 3))
    alpha = torch.tensor([0.4, 0.6], dtype=torch.float64, requires_grad=True)
    data, labels = clouds(1, 8, 2, seed=3)[0], soft_labels(1, 8, 3, seed=4)[0]
    init = (atoms_z[0].detach().clone(), atoms_y[0].clone())

    def loss(z, a):
        support_z, support_y = wasserstein_barycenter(z, a, atoms_y, init=init, n_iter=4, beta=2.0)
        return wasserstein_cost(data, support_z, labels, support_y, beta=2.0)

    loss(atoms_z, alpha).backward()
    step = 1e-6
    for index in [(0, 0, 0), (1, 3, 1), (0, 7, 1)]:
        bumped = atoms_z.detach().clone()
        bumped[index] += step
        lowered = atoms_z.detach().clone()
        lowered[index] -= step
        numeric = (float(loss(bumped, alpha.detach())) - float(loss(lowered, alpha.detach()))) / (2 * step)
        assert float(atoms_z.grad[index]) == pytest.approx(numeric, rel=1e-4, abs=1e-8)
    assert alpha.grad is not None
    assert torch.isfinite(alpha.grad).all()


def test_unlabelled_loss_gives_atom_labels_no_gradient():
    atoms_z, atoms_y = init_dictionary(3, 20, 2, 2, torch.Generator().manual_seed(0))
    atoms_y.requires_grad_()
    atoms_z.requires_grad_()
    loss = dictionary_loss(torch.randn(20, 2), atoms_z, atoms_y, torch.full((3,), 1 / 3))
    loss.backward()
    assert atoms_y.grad is None or not atoms_y.grad.any()
    assert atoms_z.grad.abs().sum() > 0


def test_adam_on_the_dictionary_loss_decreases_it():
    g = torch.Generator().manual_seed(0)
    atoms_z, atoms_y = init_dictionary(2, 20, 2, 2, g)
    atoms_z.requires_grad_()
    coords = torch.full((2,), 0.5, requires_grad=True)
    data = torch.randn(20, 2, generator=g) + torch.tensor([3.0, 0.0]) * (torch.arange(20) % 2)[:, None]
    labels = F.one_hot(torch.arange(20) % 2).float()
    optimizer = torch.optim.Adam([atoms_z, coords], lr=0.1)
    losses = []
    for _ in range(30):
        loss = dictionary_loss(data, atoms_z, atoms_y, coords, labels, generator=torch.Generator().manual_seed(1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            coords.copy_(project_simplex(coords))
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
    assert float(coords.sum()) == pytest.approx(1.0)
    assert (coords >= 0).all()


def test_class_balanced_indices_draw_every_present_class_equally():
    labels = torch.tensor([0] * 50 + [2] * 3)
    rows = class_balanced_indices(labels, 4, per_class=6, generator=torch.Generator().manual_seed(0))
    assert labels[rows].bincount(minlength=4).tolist() == [6, 0, 6, 0]


def test_init_dictionary_is_class_balanced_one_hot():
    z, y = init_dictionary(3, 20, 5, 4)
    assert z.shape == (3, 20, 5)
    assert y.shape == (3, 20, 4)
    assert (y.sum(-1) == 1).all()
    assert y.sum(1).eq(5).all()


def test_softmax_regression_and_ensemble():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(60) % 3
    z = 4 * F.one_hot(y).float() + 0.3 * torch.randn(60, 3, generator=g) + 10.0  # an offset the fit must absorb
    weight, bias = fit_softmax_regression(z, F.one_hot(y).float())
    assert ((z @ weight.T + bias).argmax(1) == y).all()
    other = (torch.zeros_like(weight), torch.zeros_like(bias))
    probabilities = ensemble_probabilities(
        z, torch.stack([weight, other[0]]), torch.stack([bias, other[1]]), torch.tensor([0.7, 0.3])
    )
    torch.testing.assert_close(probabilities.sum(1), torch.ones(60))
    assert (probabilities.argmax(1) == y).all()
    assert probabilities.min() >= 0.1 - 1e-6
