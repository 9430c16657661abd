"""Coordinate-wise median and trimmed mean against numpy / scipy, by parameter name over the clients that hold it."""

import itertools
import logging

import numpy as np
import pytest
import torch
from scipy import stats

from fedhet.core import ClientUpdate
from fedhet.functional import coordinate_median, trim_count, trimmed_mean
from fedhet.plugins import CoordinateMedian, TrimmedMean


def _stack(n: int, seed: int, dtype=torch.float64, shape=(3, 4)) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{"w": torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)} for _ in range(n)]


def _numpy(states, name="w"):
    return np.stack([s[name].double().numpy() for s in states])


@pytest.mark.parametrize("n", range(1, 9))
def test_median_is_numpys_mean_of_the_two_middle_values(n):
    states = _stack(n, seed=n)
    out = coordinate_median(states)["w"]
    np.testing.assert_array_equal(out.numpy(), np.median(_numpy(states), axis=0))
    if n % 2 == 0 and n > 0:  # torch.median would give the lower middle value instead
        assert not torch.equal(out, torch.stack([s["w"] for s in states]).median(dim=0).values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_median_keeps_the_floating_dtype(dtype):
    states = _stack(6, seed=0, dtype=dtype)
    out = coordinate_median(states)["w"]
    assert out.dtype == dtype
    expected = torch.from_numpy(np.median(_numpy(states), axis=0)).to(dtype)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("n", "beta"), list(itertools.product(range(1, 12), [0.0, 0.1, 0.2, 0.25, 0.29, 0.3, 1 / 3, 0.49]))
)
def test_trimmed_mean_matches_scipy(n, beta):
    states = _stack(n, seed=100 + n)
    out = trimmed_mean(states, beta)["w"]
    np.testing.assert_allclose(out.numpy(), stats.trim_mean(_numpy(states), beta, axis=0), rtol=1e-12, atol=1e-15)


def test_trim_count_rounds_down_as_scipy():
    assert [trim_count(0.2, n) for n in (4, 5, 9, 10)] == [0, 1, 1, 2]
    assert trim_count(0.29, 100) == int(0.29 * 100) == 28  # the float product, as scipy computes it
    assert trim_count(0.49, 3) == 1


def test_by_name_over_holders_and_integer_buffers():
    g = torch.Generator().manual_seed(0)
    states = [
        {"w": torch.randn(2, generator=g), "b": torch.tensor([1.0, 5.0]), "n": torch.tensor(3)},
        {"w": torch.randn(2, generator=g)},
        {"w": torch.randn(2, generator=g), "b": torch.tensor([2.0, 9.0]), "n": torch.tensor(10)},
        {"w": torch.randn(2, generator=g), "n": torch.tensor(4)},
    ]
    med = coordinate_median(states)
    torch.testing.assert_close(med["b"], torch.tensor([1.5, 7.0]))  # only clients 0 and 2 hold "b"
    assert med["n"].dtype == torch.int64
    assert med["n"].item() == 4
    trim = trimmed_mean(states, beta=0.34)  # one of three holders of "n" trimmed at each end
    assert trim["n"].dtype == torch.int64
    assert trim["n"].item() == 4
    torch.testing.assert_close(trim["b"], torch.tensor([1.5, 7.0]))  # floor(0.34 * 2) = 0: the plain mean
    assert trimmed_mean(states, beta=0.0)["n"].item() == round(17 / 3)  # means of integers are rounded
    masks = [[True, False], [True, True], [False, True]]
    bools = coordinate_median([{"m": torch.tensor(m)} for m in masks])["m"]
    assert bools.dtype == torch.bool
    assert bools.tolist() == [True, True]


@pytest.mark.parametrize("aggregate", [coordinate_median, lambda states: trimmed_mean(states, 0.2)])
def test_independent_of_client_order_bit_for_bit(aggregate):
    states = _stack(6, seed=3, dtype=torch.float32, shape=(50,))
    states[2]["v"] = torch.randn(4)
    states[4]["v"] = torch.randn(4)
    reference = aggregate(states)
    for perm in itertools.islice(itertools.permutations(states), 0, None, 97):
        out = aggregate(list(perm))
        assert all(torch.equal(out[k], reference[k]) for k in reference)


def test_one_client_scaled_by_100_does_not_move_the_robust_aggregates():
    states = _stack(7, seed=5)
    honest = torch.stack([s["w"] for s in states[1:]])
    states[0] = {"w": states[0]["w"] * 100}
    for out in (coordinate_median(states)["w"], trimmed_mean(states, 0.2)["w"]):
        assert (out >= honest.min(0).values).all()
        assert (out <= honest.max(0).values).all()


def test_shape_mismatch_and_bad_beta_are_named():
    with pytest.raises(ValueError, match="parameter 'w'"):
        coordinate_median([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
    for beta in (-0.1, 0.5, 1.0, float("nan")):
        with pytest.raises(ValueError, match="field 'beta'"):
            trimmed_mean([{"w": torch.zeros(2)}], beta)
        with pytest.raises(ValueError, match="TrimmedMean: field 'beta'"):
            TrimmedMean(beta)
    with pytest.raises(ValueError, match="TrimmedMean: field 'beta'"):
        TrimmedMean("a fifth")  # type: ignore[arg-type]


@pytest.mark.parametrize(("aggregator", "function"), [
    (CoordinateMedian(), coordinate_median),
    (TrimmedMean(beta=0.25), lambda states: trimmed_mean(states, 0.25)),
])  # fmt: skip
def test_aggregators_equal_the_functions_and_ignore_sample_counts(aggregator, function):
    states = _stack(5, seed=7)
    states[1]["b"] = torch.randn(3)
    for i, s in enumerate(states):
        aggregator.update(ClientUpdate(f"c{i}", num_samples=10**i, shared=s))
    out, expected = aggregator.compute(), function(states)
    assert out.keys() == expected.keys()
    assert all(torch.equal(out[k], expected[k]) for k in out)
    aggregator.reset()
    assert aggregator.compute() == {}


def test_trimmed_mean_warns_once_when_it_trims_nothing(caplog):
    aggregator = TrimmedMean(beta=0.2)
    with caplog.at_level(logging.WARNING, logger="fedhet.plugins.uploads.aggregators"):
        for _ in range(2):
            aggregator.reset()
            for i, s in enumerate(_stack(4, seed=1)):
                aggregator.update(ClientUpdate(f"c{i}", num_samples=1, shared=s))
            aggregator.compute()
    assert len(caplog.records) == 1
    assert "trims nothing from 4 uploads" in caplog.records[0].getMessage()
