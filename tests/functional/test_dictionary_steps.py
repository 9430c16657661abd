"""DaDiL's paper-faithful pieces: contiguous class-balanced atom batches and the simplex projection against cvxpy."""

import pytest
import torch

from fedhet.functional import atom_batches, init_dictionary, project_simplex


def test_atom_batches_are_the_contiguous_ranges_of_the_paper():
    batches = atom_batches(10, 4)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # ceil(10 / 4) = 3, last partial
    assert torch.cat(batches).tolist() == list(range(10))


@pytest.mark.parametrize(("n", "batch", "classes"), [(500, 100, 10), (60, 12, 3), (1024, 128, 2)])
def test_atom_batches_of_the_initial_atoms_are_class_balanced(n, batch, classes):
    _, labels = init_dictionary(3, n, 2, classes)
    for rows in atom_batches(n, batch):
        counts = labels[:, rows].sum(1)  # (K, c): points of each class in the batch of each atom
        assert counts.eq(len(rows) // classes).all()


def test_atom_batches_reject_empty_sizes():
    with pytest.raises(ValueError, match="batch_size"):
        atom_batches(10, 0)


@pytest.mark.parametrize("seed", range(5))
def test_simplex_projection_matches_cvxpy(seed):
    cp = pytest.importorskip("cvxpy")
    v = torch.randn(7, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 3
    a = cp.Variable(7)
    cp.Problem(cp.Minimize(cp.sum_squares(a - v.numpy())), [a >= 0, cp.sum(a) == 1]).solve()
    torch.testing.assert_close(project_simplex(v), torch.from_numpy(a.value).clamp_min(0), atol=1e-6, rtol=0)


def projected_steps(gradient, lr, steps):
    """Alg. 2's coordinate update, alpha <- proj(alpha - lr * gradient), from uniform."""
    alpha = torch.full_like(gradient, 1 / len(gradient))
    for _ in range(steps):
        alpha = project_simplex(alpha - lr * gradient)
    return alpha


def test_projected_steps_under_a_constant_gradient_have_a_closed_form():
    """The issue's example: gradient (28, 30, 30), 50 steps.

    Projection subtracts one constant from every coordinate, so while no coordinate reaches 0 each step moves alpha
    by ``-lr * (g - mean(g))``: after T steps ``1/3 - T lr (g - mean g)``; with lr = 0.002 that is (0.4667, 0.2667,
    0.2667). A larger step reaches the vertex e_1 after ``ceil((2/3) / (lr * 4/3))`` steps and stays there.
    """
    g = torch.tensor([28.0, 30.0, 30.0], dtype=torch.float64)
    expected = 1 / 3 - 50 * 0.002 * (g - g.mean())
    torch.testing.assert_close(projected_steps(g, 0.002, 50), expected)
    torch.testing.assert_close(expected, torch.tensor([7 / 15, 4 / 15, 4 / 15], dtype=torch.float64))
    torch.testing.assert_close(projected_steps(g, 0.1, 50), torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(projected_steps(g, 0.1, 1), torch.tensor([7 / 15, 4 / 15, 4 / 15], dtype=torch.float64))


def test_adam_with_a_fresh_state_leaves_alpha_at_uniform_under_the_same_gradient():
    """Why Adam is not the default: its first step is lr * sign(g) for every coordinate, which projection undoes."""
    alpha = torch.full((3,), 1 / 3, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([alpha], lr=0.1)
    for _ in range(50):
        alpha.grad = torch.tensor([28.0, 30.0, 30.0], dtype=torch.float64)
        optimizer.step()
        with torch.no_grad():
            alpha.copy_(project_simplex(alpha))
    torch.testing.assert_close(alpha.detach(), torch.full((3,), 1 / 3, dtype=torch.float64))
