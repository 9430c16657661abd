import pytest

from fedhet.plugins import FullParticipation, UniformSampler

IDS = [f"c{i:02d}" for i in range(20)]


def test_full_participation():
    assert FullParticipation().sample(IDS, 3, 10, seed=0) == IDS


@pytest.mark.parametrize(("fraction", "min_clients", "expected"), [(0.3, 1, 6), (0.01, 4, 4), (1.0, 1, 20)])
def test_uniform_count(fraction, min_clients, expected):
    chosen = UniformSampler(fraction, min_clients).sample(IDS, 0, 10, seed=0)
    assert len(chosen) == expected
    assert len(set(chosen)) == expected
    assert chosen == [c for c in IDS if c in chosen]  # in client order


def test_uniform_is_a_function_of_seed_and_round():
    sampler = UniformSampler(0.25)
    assert sampler.sample(IDS, 4, 10, seed=1) == sampler.sample(IDS, 4, 10, seed=1)
    draws = {tuple(sampler.sample(IDS, r, 10, seed=1)) for r in range(10)}
    assert len(draws) > 5


def test_full_last_round():
    sampler = UniformSampler(0.1, full_last_round=True)
    assert sampler.sample(IDS, 9, 10, seed=0) == IDS
    assert len(sampler.sample(IDS, 8, 10, seed=0)) == 2


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="fraction"):
        UniformSampler(0.0)
    with pytest.raises(ValueError, match="min_clients"):
        UniformSampler(0.5, min_clients=0)
    with pytest.raises(ValueError, match="min_clients"):
        UniformSampler(0.5, min_clients=30).validate(len(IDS))
