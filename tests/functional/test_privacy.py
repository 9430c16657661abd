"""Clipping, Gaussian noise and its calibration: closed forms and statistics with tolerances from the sample size."""

import math

import pytest
import torch
from opacus.accountants import RDPAccountant

from fedhet.functional.privacy import (
    add_gaussian_noise,
    clip_by_global_norm,
    gaussian_noise_std,
    global_l2_norm,
    noise_multiplier_for,
)


@pytest.mark.parametrize("max_norm", [0.5, 1.0, 5.0, 13.0, 100.0])
def test_clipping_closed_form(max_norm):
    tensors = {"w": torch.tensor([[3.0, 4.0], [0.0, 12.0]]), "b": torch.tensor([0.0])}  # global norm 13
    clipped, norm = clip_by_global_norm(tensors, max_norm)
    assert norm == pytest.approx(13.0)
    scale = min(1.0, max_norm / 13.0)
    torch.testing.assert_close(clipped["w"], tensors["w"] * scale)
    torch.testing.assert_close(clipped["b"], tensors["b"])
    assert float(global_l2_norm(clipped)) == pytest.approx(min(13.0, max_norm), rel=1e-6)


def test_clipping_keeps_direction_dtype_and_zero():
    g = torch.Generator().manual_seed(0)
    tensors = {"a": torch.randn(7, generator=g, dtype=torch.float64), "b": torch.randn(3, 2, generator=g)}
    clipped, norm = clip_by_global_norm(tensors, 0.1)
    assert clipped["a"].dtype == torch.float64
    assert clipped["b"].dtype == torch.float32
    flat = torch.cat([t.double().flatten() for t in tensors.values()])
    flat_clipped = torch.cat([t.double().flatten() for t in clipped.values()])
    torch.testing.assert_close(flat_clipped, flat * 0.1 / norm, rtol=1e-6, atol=1e-9)
    zero, zero_norm = clip_by_global_norm({"z": torch.zeros(4)}, 1.0)
    assert zero_norm == 0.0
    assert torch.equal(zero["z"], torch.zeros(4))


def test_clipping_refuses_bad_input():
    with pytest.raises(ValueError, match="'max_norm' must be positive"):
        clip_by_global_norm({"a": torch.ones(2)}, 0.0)
    with pytest.raises(TypeError, match="tensor 'counts' has dtype torch.int64"):
        clip_by_global_norm({"counts": torch.ones(2, dtype=torch.long)}, 1.0)


def test_noise_std_calibration():
    assert gaussian_noise_std(1.1, 2.0, 4) == pytest.approx(0.55)
    assert gaussian_noise_std(0.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="clip_norm > 0"):
        gaussian_noise_std(1.0, 0.0)


@pytest.mark.parametrize("std", [0.01, 0.3, 2.5])
def test_noise_has_the_calibrated_standard_deviation(std):
    n = 200_000
    noisy = add_gaussian_noise({"x": torch.zeros(n), "y": torch.ones(10)}, std, torch.Generator().manual_seed(7))
    x = noisy["x"].double()
    # sample mean ~ N(0, std^2/n); sample std has standard error ~ std / sqrt(2n): 5 standard errors of slack
    assert abs(float(x.mean())) < 5 * std / math.sqrt(n)
    assert float(x.std()) == pytest.approx(std, abs=5 * std / math.sqrt(2 * n))
    assert noisy["y"].shape == (10,)


def test_noise_is_reproducible_from_the_generator():
    a = add_gaussian_noise({"x": torch.zeros(5)}, 1.0, torch.Generator().manual_seed(3))
    b = add_gaussian_noise({"x": torch.zeros(5)}, 1.0, torch.Generator().manual_seed(3))
    c = add_gaussian_noise({"x": torch.zeros(5)}, 1.0, torch.Generator().manual_seed(4))
    assert torch.equal(a["x"], b["x"])
    assert not torch.equal(a["x"], c["x"])


@pytest.mark.parametrize(("epsilon", "sample_rate", "rounds"), [(1.0, 1.0, 30), (4.0, 0.3, 50), (16.0, 0.1, 200)])
def test_noise_multiplier_for_spends_the_target_epsilon(epsilon, sample_rate, rounds):
    z = noise_multiplier_for(epsilon, 1e-5, sample_rate, rounds)
    accountant = RDPAccountant()
    for _ in range(rounds):
        accountant.step(noise_multiplier=z, sample_rate=sample_rate)
    spent = accountant.get_epsilon(delta=1e-5)
    assert spent <= epsilon
    assert spent == pytest.approx(epsilon, abs=0.05 * epsilon)
