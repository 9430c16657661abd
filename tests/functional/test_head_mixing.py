"""FedPAC's simplex QP against cvxpy, its closed-form cases, and head mixing."""

import pytest
import torch

from fedhet.functional import (
    collaboration_matrix,
    combination_weights,
    mix_heads,
    project_simplex,
    repair_psd,
    solve_simplex_qp,
)


def random_psd(m, rank, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, rank, generator=g, dtype=torch.float64)
    return a @ a.T + torch.diag(torch.rand(m, generator=g, dtype=torch.float64) * 0.1)


def test_project_simplex_matches_definition():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(5, 7, generator=g, dtype=torch.float64) * 3
    p = project_simplex(v)
    assert torch.allclose(p.sum(-1), torch.ones(5, dtype=torch.float64))
    assert (p >= 0).all()
    # the projection is the closest simplex point: no random simplex point is closer
    for _ in range(200):
        q = torch.distributions.Dirichlet(torch.ones(7, dtype=torch.float64)).sample((5,))
        assert ((v - p).pow(2).sum(-1) <= (v - q).pow(2).sum(-1) + 1e-12).all()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("m", "rank"), [(5, 2), (12, 30), (20, 4)])
def test_qp_matches_cvxpy(seed, m, rank):
    cp = pytest.importorskip("cvxpy")
    p = random_psd(m, rank, seed)
    ours = solve_simplex_qp(p)
    a = cp.Variable(m)
    problem = cp.Problem(cp.Minimize(cp.quad_form(a, cp.psd_wrap(p.numpy()))), [cp.sum(a) == 1, a >= 0])
    problem.solve()
    assert abs(float(ours.sum()) - 1) < 1e-9
    assert (ours >= 0).all()
    objective = float(ours @ p @ ours)
    assert objective <= problem.value + 1e-7 * max(1.0, abs(problem.value))
    assert torch.allclose(ours, torch.as_tensor(a.value, dtype=torch.float64).clamp_min(0), atol=2e-3)


def test_qp_repairs_an_indefinite_matrix():
    p = random_psd(6, 3, 1)
    p[0, 1] += 5.0  # asymmetric and indefinite
    alpha = solve_simplex_qp(p)
    assert abs(float(alpha.sum()) - 1) < 1e-9
    assert (alpha >= 0).all()
    repaired = repair_psd(p)
    assert torch.allclose(repaired, repaired.T)
    assert torch.linalg.eigvalsh(repaired).min() > -1e-10


def test_qp_rejects_non_finite():
    with pytest.raises(ValueError, match="NaN"):
        solve_simplex_qp(torch.tensor([[float("nan"), 0.0], [0.0, 1.0]]))


def test_matrix_form_equals_frobenius_form():
    g = torch.Generator().manual_seed(3)
    h = torch.randn(6, 4, 5, generator=g, dtype=torch.float64)
    v = torch.rand(6, generator=g, dtype=torch.float64)
    alpha = torch.distributions.Dirichlet(torch.ones(6, dtype=torch.float64)).sample()
    p = collaboration_matrix(h, v, target=2)
    frobenius = (h[2] - torch.einsum("j,jkd->kd", alpha, h)).pow(2).sum() + (alpha.pow(2) * v).sum()
    assert torch.allclose(alpha @ p @ alpha, frobenius)


def test_totally_different_clients_keep_their_own_head():
    h = torch.eye(4, dtype=torch.float64).reshape(4, 1, 4) * 10  # orthogonal statistics, outside each other's hull
    weights = combination_weights(h, torch.zeros(4, dtype=torch.float64))
    assert torch.allclose(weights, torch.eye(4, dtype=torch.float64))


def test_identical_clients_get_uniform_weights():
    h = torch.ones(5, 3, 2)
    weights = combination_weights(h, torch.full((5,), 0.7))
    assert torch.allclose(weights, torch.full((5, 5), 0.2, dtype=torch.float64), atol=1e-6)


def test_groups_weight_each_other_and_threshold_renormalises():
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(2, 3, 4, generator=g) * 5
    h = centres[torch.tensor([0, 1, 0, 1, 0, 1])] + 0.01 * torch.randn(6, 3, 4, generator=g)
    weights = combination_weights(h, torch.full((6,), 0.5))
    same = torch.tensor([0, 1, 0, 1, 0, 1])
    mask = same[:, None] == same[None, :]
    assert (weights[mask].reshape(6, 3).sum(1) > 0.99).all()
    assert torch.allclose(weights.sum(1), torch.ones(6, dtype=torch.float64))
    assert ((weights == 0) | (weights > 1e-3)).all()


def test_larger_own_variance_never_raises_own_weight():
    g = torch.Generator().manual_seed(4)
    h = torch.randn(5, 3, 4, generator=g, dtype=torch.float64) * 0.3
    own = []
    for scale in (0.0, 0.5, 2.0, 8.0):
        v = torch.full((5,), 0.5, dtype=torch.float64)
        v[0] = scale
        own.append(float(solve_simplex_qp(collaboration_matrix(h, v, 0))[0]))
    assert all(a >= b - 1e-6 for a, b in zip(own, own[1:], strict=False))
    assert own[0] > own[-1]


def test_unsolvable_client_falls_back_to_its_own_head():
    h = torch.randn(3, 2, 2, dtype=torch.float64)
    h[1, 0, 0] = float("nan")
    weights = combination_weights(h, torch.ones(3, dtype=torch.float64))
    assert torch.equal(weights[1], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))


def test_mix_heads_weights_weight_and_bias():
    weights = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    heads = {"w": torch.randn(3, 4, 2), "b": torch.randn(3, 4)}
    mixed = mix_heads(weights, heads)
    assert torch.allclose(mixed["w"][0], (heads["w"][0] + heads["w"][1]) / 2)
    assert torch.allclose(mixed["b"][2], 0.2 * heads["b"][0] + 0.3 * heads["b"][1] + 0.5 * heads["b"][2])
    assert torch.equal(mixed["w"][1], heads["w"][1])
    assert mixed["w"].dtype == torch.float32
