"""Domain-adaptation federations: one client per domain, the target switch, the toy's geometry, the transforms."""

import math

import pytest
import torch

from fedhet.datamodules import DigitsDomains, DigitsTransformDomains, RotatedBlobsDomains


def test_blobs_toy_has_one_client_per_angle_and_a_switchable_target():
    toy = RotatedBlobsDomains(samples_per_class=20, test_fraction=0.0)
    assert toy.client_ids == ["theta0", "theta15", "theta30", "theta45"]
    x, y = toy.client("theta30").train_dataset.x, toy.client("theta30").train_dataset.y
    shift = x[y == 1] - x[y == 0]  # class 1 is class 0 moved by 6 (cos t, sin t)
    expected = 6 * torch.tensor([math.cos(math.radians(30)), math.sin(math.radians(30))])
    torch.testing.assert_close(shift, expected.expand_as(shift))
    assert RotatedBlobsDomains(samples_per_class=20, include_target=False).client_ids == [
        "theta0",
        "theta15",
        "theta30",
    ]
    sources = RotatedBlobsDomains(samples_per_class=20, include_target=False, test_fraction=0.0)
    torch.testing.assert_close(sources.client("theta0").train_dataset.x, toy.client("theta0").train_dataset.x)


def test_unknown_target_is_named():
    with pytest.raises(ValueError, match="'theta90'"):
        RotatedBlobsDomains(target="theta90", samples_per_class=4).setup()


def test_digit_sources_share_one_grid():
    data = DigitsDomains(sources=["mfeat_pix", "sklearn_digits"], target="sklearn_digits", grid=(12, 12))
    assert {spec.input_shape for spec in data.specs.values()} == {(1, 12, 12)}
    assert DigitsDomains(
        sources=["mfeat_pix", "sklearn_digits"], include_target=False, target="mfeat_pix"
    ).client_ids == ["sklearn_digits"]


def test_transform_domains_are_disjoint_parts_of_sklearn_digits():
    data = DigitsTransformDomains(test_fraction=0.0)
    assert data.client_ids == ["identity", "rot90", "invert", "noise"]
    sizes = [data.specs[cid].num_train for cid in data.client_ids]
    assert sum(sizes) == 1797
    invert = data.client("invert").train_dataset.x
    assert float(invert.max()) == 1.0  # the blank background became white
    assert float(invert[:, 0, 0, 0].mean()) > 0.9
