"""HyFEM's server maths: closed forms against dense selection matrices and brute force, planted maps (spec §8.4)."""

import itertools

import pytest
import torch

from fedhet.functional import (
    Classifier,
    match_neurons,
    matched_average,
    matching_cost,
    matching_objective,
    model_matching,
    project_classifier,
    proximal_penalty,
    weighted_mean,
)

H0, E0, K = 5, 6, 3


def random_classifier(h, e, k=K, generator=None):
    return Classifier(
        torch.randn(h, e, generator=generator),
        torch.randn(h, generator=generator),
        torch.randn(k, h, generator=generator),
        torch.randn(k, generator=generator),
    )


def selection(rows, size):
    """Dense 0/1 matrix with a single 1 per row at ``rows[i]``: the paper's selection matrix."""
    out = torch.zeros(len(rows), size, dtype=torch.float64)
    out[torch.arange(len(rows)), rows] = 1
    return out


def dense_pi(cols, perm, h0=H0, e0=E0):
    """The classifier's full selection matrix: vec(w_m) = Pi vec(w_0) for vec = cat(w1, b1, w2, b2) flattened."""
    p_in, p_hid = selection(cols, e0), selection(perm, h0)
    blocks = [torch.kron(p_hid, p_in), p_hid, torch.kron(torch.eye(K, dtype=torch.float64), p_hid), torch.eye(K)]
    return torch.block_diag(*[b.double() for b in blocks])


def vec(net):
    return torch.cat([t.double().reshape(-1) for t in net])


def planted(num_clients=4, h=4, noise=1e-3, seed=0, h0=H0, e0=E0):
    """A server classifier and clients that are noisy matched slices of it, with their true maps."""
    g = torch.Generator().manual_seed(seed)
    server = random_classifier(h0, e0, generator=g)
    cols = [torch.randperm(e0, generator=g)[: e0 - m % 3].sort().values for m in range(num_clients)]
    truth = [torch.randperm(h0, generator=g)[:h] for _ in range(num_clients)]
    clients = [
        Classifier(*(t + noise * torch.randn(t.shape, generator=g) for t in project_classifier(server, c, p)))
        for c, p in zip(cols, truth, strict=True)
    ]
    weights = (torch.rand(num_clients, generator=g) + 0.5).tolist()
    return server, clients, cols, truth, weights


def test_projection_is_a_gather_of_the_server():
    server = random_classifier(H0, E0)
    cols, perm = torch.tensor([4, 0, 2]), torch.tensor([3, 1])
    out = project_classifier(server, cols, perm)
    pi = dense_pi(cols, perm)
    assert torch.allclose(vec(out), pi @ vec(server), atol=1e-6)


def test_matched_average_is_the_least_squares_closed_form_and_keeps_uncovered_coordinates():
    g = torch.Generator().manual_seed(1)
    previous = random_classifier(H0, E0, generator=g)
    cols = [torch.tensor([0, 1, 2]), torch.tensor([2, 3]), torch.tensor([1, 2])]
    perms = [torch.tensor([0, 1, 2]), torch.tensor([2, 0, 1]), torch.tensor([1, 3, 0])]  # neuron 4, input 4/5: nobody
    clients = [random_classifier(3, len(c), generator=g) for c in cols]
    weights = [0.5, 0.3, 0.2]
    server, cover = matched_average(clients, cols, perms, weights, previous)
    gram = sum(w * dense_pi(c, p).T @ dense_pi(c, p) for w, c, p in zip(weights, cols, perms, strict=True))
    rhs = sum(w * dense_pi(c, p).T @ vec(m) for w, c, p, m in zip(weights, cols, perms, clients, strict=True))
    covered = gram.diagonal() > 0
    assert torch.allclose(gram, torch.diag(gram.diagonal()))  # Pi^T Pi is a coverage mask
    expected = torch.where(covered, rhs / gram.diagonal().clamp_min(1e-12), vec(previous))
    assert torch.allclose(vec(server), expected, atol=1e-6)
    assert torch.allclose(vec(cover), gram.diagonal())
    assert not covered.all()  # the test does exercise uncovered coordinates
    assert torch.equal(server.w1[4], previous.w1[4])
    assert torch.equal(server.w1[:, 4:], previous.w1[:, 4:])


def test_lift_then_project_gives_the_client_back():
    server = random_classifier(H0, E0)
    client = random_classifier(3, 4)
    cols, perm = torch.tensor([5, 1, 0, 3]), torch.tensor([4, 0, 2])
    lifted, _ = matched_average([client], [cols], [perm], [0.7], server)
    back = project_classifier(lifted, cols, perm)
    assert all(torch.allclose(a, b) for a, b in zip(back, client, strict=True))


def test_extractor_closed_form_is_the_per_block_mean_over_holders_and_the_minimiser():
    g = torch.Generator().manual_seed(2)
    holders = [{"a": torch.randn(3, generator=g), "b": torch.randn(2, generator=g)}, {"a": torch.randn(3, generator=g)}]
    holders.append({"b": torch.randn(2, generator=g), "c": torch.randn(1, generator=g)})
    p = [0.2, 0.5, 0.3]
    closed = weighted_mean(holders, p)
    assert torch.allclose(closed["a"], (0.2 * holders[0]["a"] + 0.5 * holders[1]["a"]) / 0.7)
    theta = {name: torch.zeros_like(value, requires_grad=True) for name, value in closed.items()}
    optimizer = torch.optim.LBFGS(list(theta.values()), max_iter=100, tolerance_grad=1e-10)

    def objective():
        optimizer.zero_grad()
        loss = sum(
            w * proximal_penalty([theta[n] for n in s], list(s.values())) for w, s in zip(p, holders, strict=True)
        )
        loss.backward()
        return loss

    optimizer.step(objective)
    assert all(torch.allclose(theta[n].detach(), closed[n], atol=1e-5) for n in closed)


def test_proximal_penalty_gradient_is_the_gap():
    w, anchor = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)
    (0.3 * proximal_penalty([w], [anchor])).backward()
    assert torch.allclose(w.grad, 0.3 * (w.detach() - anchor))


@pytest.mark.parametrize("mode", ["exact", "incoming", "descent"])
def test_hungarian_minimises_the_cost_over_every_injective_map(mode):
    g = torch.Generator().manual_seed(3)
    others = [random_classifier(4, 4, generator=g) for _ in range(2)]
    cols = [torch.tensor([0, 1, 2, 3]), torch.tensor([2, 3, 4, 5])]
    perms = [torch.tensor([0, 1, 2, 3]), torch.tensor([4, 2, 0, 1])]
    reference, coverage = matched_average(others, cols, perms, [0.4, 0.6], random_classifier(H0, E0, generator=g))
    client, client_cols = random_classifier(3, 3, generator=g), torch.tensor([1, 2, 5])
    cost = matching_cost(client, client_cols, reference, coverage, 0.5, mode)
    best = min(sum(float(cost[j, a]) for j, a in enumerate(p)) for p in itertools.permutations(range(H0), 3))
    perm = match_neurons(cost)
    assert sum(float(cost[j, a]) for j, a in enumerate(perm.tolist())) == pytest.approx(best)


def test_exact_cost_is_the_clients_own_penalty():
    g = torch.Generator().manual_seed(4)
    reference = random_classifier(H0, E0, generator=g)
    coverage = Classifier(*(torch.ones_like(t, dtype=torch.float64) for t in reference))
    client, cols = random_classifier(3, 4, generator=g), torch.tensor([0, 2, 3, 5])
    cost = matching_cost(client, cols, reference, coverage, 1.0, "exact")
    for perm in ([0, 1, 2], [4, 2, 1]):
        projected = project_classifier(reference, cols, torch.tensor(perm))
        penalty = (vec(client) - vec(projected)).pow(2).sum() - (client.b2 - reference.b2).pow(2).sum()
        assert sum(float(cost[j, a]) for j, a in enumerate(perm)) == pytest.approx(float(penalty), rel=1e-6)


@pytest.mark.parametrize("mode", ["exact", "incoming", "descent"])
def test_one_matching_step_recovers_a_planted_map(mode):
    server, clients, cols, truth, weights = planted(seed=5)
    perms = list(truth)
    perms[2] = torch.randperm(H0)[:4]
    others = [0, 1, 3]
    reference, coverage = matched_average(
        [clients[i] for i in others],
        [cols[i] for i in others],
        [truth[i] for i in others],
        weights[:2] + weights[3:],
        server,
    )
    cost = matching_cost(clients[2], cols[2], reference, coverage, weights[2], mode)
    assert torch.equal(match_neurons(cost), truth[2])


def test_descent_passes_never_increase_the_objective_and_recover_planted_maps():
    recovered = 0
    for seed in range(6):
        server, clients, cols, truth, weights = planted(num_clients=4, h=H0, seed=seed)
        g = torch.Generator().manual_seed(seed)
        perms = [torch.randperm(H0, generator=g) for _ in clients]
        previous = random_classifier(H0, E0, generator=g)
        values = []
        for _ in range(12):
            current, _ = matched_average(clients, cols, perms, weights, previous)
            values.append(matching_objective(clients, cols, perms, weights, current))
            _, perms = model_matching(clients, cols, perms, weights, previous, 1, "descent", g)
        assert all(b <= a + 1e-9 for a, b in itertools.pairwise(values))
        sigma = torch.empty(H0, dtype=torch.int64)
        sigma[truth[0]] = perms[0]  # a common relabelling of the server neurons, read through client 0
        if all(torch.equal(sigma[t], p) for t, p in zip(truth, perms, strict=True)):
            recovered += 1
            final, _ = matched_average(clients, cols, perms, weights, previous)
            assert torch.allclose(final.w2[:, sigma], server.w2, atol=1e-2)
    assert recovered >= 4


def test_model_matching_is_deterministic_given_the_generator():
    _, clients, cols, _, weights = planted(seed=7, noise=0.5)
    start = [torch.arange(4)] * 4
    previous = random_classifier(H0, E0)
    runs = [
        model_matching(clients, cols, start, weights, previous, 8, "exact", torch.Generator().manual_seed(3))
        for _ in range(2)
    ]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(runs[0][0], runs[1][0], strict=True))


def test_new_neurons_cost_the_median_of_occupied_ones():
    reference = random_classifier(H0, E0)
    coverage = Classifier(*(torch.zeros_like(t, dtype=torch.float64) for t in reference))
    coverage.b1[:3] = 1.0
    cost = matching_cost(random_classifier(2, 2), torch.tensor([0, 1]), reference, coverage, 1.0)
    assert torch.allclose(cost[:, 3:], cost[:, :3].median().expand(2, 2))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="mode"):
        matching_cost(
            random_classifier(2, 2),
            torch.tensor([0, 1]),
            random_classifier(H0, E0),
            random_classifier(H0, E0),
            1.0,
            "bad",
        )
    with pytest.raises(ValueError, match="neurons"):
        match_neurons(torch.zeros(3, 2))
