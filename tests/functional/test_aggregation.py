import subprocess
import sys

import pytest
import torch

from fedhet.core import ClientUpdate
from fedhet.functional import weighted_mean
from fedhet.plugins import WeightedMean


def _states(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [
        {"w": torch.randn(3, 2, generator=g), "b": torch.randn(2, generator=g)},
        {"w": torch.randn(3, 2, generator=g)},
        {"w": torch.randn(3, 2, generator=g), "b": torch.randn(2, generator=g), "n": torch.tensor(7)},
    ]


def test_weighted_mean_matches_closed_form_over_holders():
    states = _states()
    weights = [1.0, 2.0, 5.0]
    out = weighted_mean(states, weights)
    expected_w = sum(w * s["w"] for w, s in zip(weights, states, strict=False)) / 8.0
    expected_b = (1.0 * states[0]["b"] + 5.0 * states[2]["b"]) / 6.0  # only clients 0 and 2 hold "b"
    torch.testing.assert_close(out["w"], expected_w)
    torch.testing.assert_close(out["b"], expected_b)
    assert out["n"].dtype == torch.int64
    assert out["n"].item() == 7


def test_uniform_when_no_weights():
    states = _states(1)
    out = weighted_mean(states)
    torch.testing.assert_close(out["w"], torch.stack([s["w"] for s in states]).mean(0))


def test_streaming_class_equals_function():
    states = _states(2)
    agg = WeightedMean()
    for i, s in enumerate(states):
        agg.update(ClientUpdate(f"c{i}", num_samples=i + 1, shared=s))
    batch = weighted_mean(states, [1, 2, 3])
    streamed = agg.compute()
    assert streamed.keys() == batch.keys()
    for k in batch:
        torch.testing.assert_close(streamed[k], batch[k])
    agg.reset()
    assert agg.compute() == {}


def test_uniform_weighting_ignores_sample_counts():
    states = _states(3)
    agg = WeightedMean("uniform")
    for i, s in enumerate(states):
        agg.update(ClientUpdate(f"c{i}", num_samples=10**i, shared=s))
    torch.testing.assert_close(agg.compute()["w"], weighted_mean(states)["w"])


def test_shape_mismatch_is_named():
    with pytest.raises(ValueError, match="parameter 'w'"):
        weighted_mean([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])


def test_bad_arguments():
    with pytest.raises(ValueError, match="weights"):
        weighted_mean([{"w": torch.zeros(2)}], [1.0, 2.0])
    with pytest.raises(ValueError, match="non-negative"):
        weighted_mean([{"w": torch.zeros(2)}], [-1.0])
    with pytest.raises(ValueError, match="weighting"):
        WeightedMean("median")


def test_functional_imports_no_lightning():
    code = "import sys, fedhet.functional; assert 'lightning' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
