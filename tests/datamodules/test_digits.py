from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from fedhet.datamodules import DigitsFederation


@pytest.fixture(scope="module")
def federation() -> DigitsFederation:
    digits = DigitsFederation()
    digits.setup()
    return digits


def _all_labels(client) -> torch.Tensor:
    return torch.cat([client.train_dataset.y, client.val_dataset.y, client.test_dataset.y])


def test_default_federation_shape(federation):
    assert federation.client_ids == [f"client_{i:03d}" for i in range(10)]
    assert federation.num_classes == 10
    total = 0
    for spec in federation.specs.values():
        assert spec.input_shape == (64,)
        assert spec.num_classes == 10
        assert spec.num_val == 0
        assert spec.num_test == pytest.approx(0.25 * (spec.num_train + spec.num_test), abs=1)
        total += spec.num_train + spec.num_val + spec.num_test
    assert total == 1797


def test_clients_partition_the_digits(federation):
    rows = federation.source_indices
    assert list(rows) == federation.client_ids
    assert min(len(r) for r in rows.values()) >= 10
    np.testing.assert_array_equal(np.sort(np.concatenate(list(rows.values()))), np.arange(1797))
    targets = load_digits().target
    for client_id, client in federation.clients.items():
        counts = torch.bincount(_all_labels(client), minlength=10).numpy()
        np.testing.assert_array_equal(counts, np.bincount(targets[rows[client_id]], minlength=10))


def test_features_are_scaled_float32_and_labels_int64(federation):
    x, y = next(iter(federation.client("client_000").train_dataloader()))
    assert x.dtype == torch.float32
    assert y.dtype == torch.int64
    assert x.shape[1:] == (64,)
    assert len(y) <= 32
    for client in federation.clients.values():
        assert client.train_dataset.x.min() >= 0.0
        assert client.train_dataset.x.max() <= 1.0


def test_label_skew_is_present(federation):
    histograms = [
        torch.bincount(_all_labels(c), minlength=10) / len(_all_labels(c)) for c in federation.clients.values()
    ]
    assert any(not torch.allclose(histograms[0], h) for h in histograms[1:])
    assert max(float(h.max()) for h in histograms) > 0.3  # some client is dominated by one digit


def test_same_seed_same_federation_other_seed_differs():
    first, again, other = (DigitsFederation(num_clients=4, seed=s, test_fraction=0.2) for s in (5, 5, 6))
    for client_id in first.client_ids:
        np.testing.assert_array_equal(first.source_indices[client_id], again.source_indices[client_id])
        torch.testing.assert_close(first.client(client_id).test_dataset.x, again.client(client_id).test_dataset.x)
    assert any(not np.array_equal(first.source_indices[c], other.source_indices[c]) for c in first.client_ids)


def test_options_reach_the_clients():
    federation = DigitsFederation(num_clients=3, val_fraction=0.1, test_fraction=0.2, batch_size=7, eval_batch_size=9)
    assert federation.hparams.num_clients == 3
    client = federation.client("client_002")
    assert (client.batch_size, client.eval_batch_size) == (7, 9)
    assert client.spec.num_val > 0


def test_too_many_clients_for_min_samples_is_refused():
    with pytest.raises(ValueError, match="num_clients"):
        DigitsFederation(num_clients=200, min_samples=10).setup()
