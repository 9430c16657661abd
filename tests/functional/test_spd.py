"""Trial covariances and log-Euclidean tangent vectors against NumPy and SciPy."""

import numpy as np
import pytest
import scipy.linalg
import torch

from fedhet.functional import tangent_vectors, trial_covariances


def test_trial_covariances_match_numpy_with_shrinkage():
    signals = torch.randn(3, 4, 20, dtype=torch.float64)
    out = trial_covariances(signals, shrinkage=0.25)
    for i in range(3):
        sample = np.cov(signals[i].numpy())
        expected = 0.75 * sample + 0.25 * np.trace(sample) / 4 * np.eye(4)
        assert np.allclose(out[i].numpy(), expected)
    short = trial_covariances(torch.randn(2, 6, 3, dtype=torch.float64), shrinkage=0.1)  # T <= c: still definite
    assert (torch.linalg.eigvalsh(short) > 0).all()
    with pytest.raises(ValueError, match="shrinkage"):
        trial_covariances(signals, shrinkage=2.0)


def test_tangent_vectors_are_the_scaled_upper_triangle_of_logm():
    a = torch.randn(5, 4, 4, dtype=torch.float64)
    spd = a @ a.mT + 0.5 * torch.eye(4, dtype=torch.float64)
    vectors = tangent_vectors(spd)
    assert vectors.shape == (5, 10)
    for i in range(5):
        log = scipy.linalg.logm(spd[i].numpy()).real
        assert np.isclose(np.linalg.norm(vectors[i].numpy()), np.linalg.norm(log))  # isometry
        rows, cols = np.triu_indices(4)
        scale = np.where(rows == cols, 1.0, np.sqrt(2.0))
        assert np.allclose(vectors[i].numpy(), log[rows, cols] * scale)
