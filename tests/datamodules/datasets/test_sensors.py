"""SensorCovarianceFederation: montages, dimensions, classes; the real sktime data when sktime is installed."""

import numpy as np
import pytest

from fedhet.datamodules import SensorCovarianceFederation
from fedhet.datamodules.datasets import sensors


@pytest.fixture
def fake_series(monkeypatch):
    """40 trials per class of 9 classes, 12 channels, varying lengths: no sktime needed."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(9), 40)
    trials = [rng.standard_normal((12, int(rng.integers(7, 30)))) * (1 + label) for label in labels]
    monkeypatch.setattr(sensors, "load_sensor_series", lambda dataset: (trials, labels))


def test_each_client_has_its_montage_and_classes(fake_series):
    federation = SensorCovarianceFederation(num_clients=6, min_channels=3, max_channels=8, classes_per_client=3)
    montages = federation.montages
    for cid, spec in federation.specs.items():
        channels = len(montages[cid])
        assert 3 <= channels <= 8
        assert spec.input_shape == (channels * (channels + 1) // 2,)
        assert len(spec.classes) == 3
    assert set().union(*(set(s.classes) for s in federation.specs.values())) == set(range(9))
    assert len({len(m) for m in montages.values()}) > 1  # different channel counts, so different input dimensions


def test_invalid_arguments():
    with pytest.raises(ValueError, match="max_channels"):
        SensorCovarianceFederation(max_channels=13)
    with pytest.raises(ValueError, match="classes_per_client"):
        SensorCovarianceFederation(dataset="basic_motions", max_channels=6, classes_per_client=5)


@pytest.mark.slow
def test_real_japanese_vowels_from_sktime():
    pytest.importorskip("sktime")
    trials, labels = sensors.load_sensor_series("japanese_vowels")
    assert len(trials) == 640
    assert trials[0].shape[0] == 12
    assert set(labels.tolist()) == set(range(9))
    federation = SensorCovarianceFederation(num_clients=4, seed=1)
    assert sum(spec.num_train + spec.num_test for spec in federation.specs.values()) == 640
