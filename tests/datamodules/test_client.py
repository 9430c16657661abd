from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from fedhet.datamodules import ClientDataModule, TensorBatchLoader, TensorPairDataset, collate_batched

CLIENT = "site_a"
NUM_CLASSES = 10


def _data(n: int = 20, dim: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Features whose first column is the row number, so splits can be traced back to rows."""
    x = torch.rand(n, dim)
    x[:, 0] = torch.arange(n, dtype=torch.float32)
    return x, torch.arange(n) % NUM_CLASSES


def _client(**overrides) -> ClientDataModule:
    x, y = _data()
    arguments = {"client_id": CLIENT, "x": x, "y": y, "num_classes": NUM_CLASSES} | overrides
    return ClientDataModule(**arguments)


def _with_nan_rows(rows: list[int]) -> torch.Tensor:
    x, _ = _data()
    x[rows, 1] = float("nan")
    return x


def _with_inf(n: int) -> torch.Tensor:
    x = torch.rand(n, 4)
    x[0, 3] = float("inf")
    return x


VALID_VAL = {"x_val": torch.rand(5, 4), "y_val": torch.arange(5)}


@pytest.mark.parametrize(
    ("overrides", "error", "field", "detail"),
    [
        pytest.param({"x": torch.ones(20, 4, dtype=torch.int64)}, TypeError, "x", "floating point", id="x-int"),
        pytest.param({"x": np.ones((20, 4), dtype=np.float32)}, TypeError, "x", "torch.Tensor", id="x-numpy"),
        pytest.param({"y": torch.zeros(20)}, TypeError, "y", "integers", id="y-float"),
        pytest.param({"y": torch.ones(20, dtype=torch.bool)}, TypeError, "y", "integers", id="y-bool"),
        pytest.param({"x": torch.rand(20)}, ValueError, "x", "(num_samples, *feature_shape)", id="x-1d"),
        pytest.param({"y": torch.zeros(20, 1).long()}, ValueError, "y", "(num_samples,)", id="y-2d"),
        pytest.param({"y": torch.zeros(19).long()}, ValueError, "y", "19 labels for 20 samples", id="y-length"),
        pytest.param({"x": _with_nan_rows([3, 7])}, ValueError, "x", "2 rows with NaN or Inf", id="x-nan"),
        pytest.param(
            {"y": torch.tensor([12] + [0] * 19)}, ValueError, "y", "has label 12 outside [0, 10)", id="y-above"
        ),
        pytest.param({"y": -torch.ones(20).long()}, ValueError, "y", "label -1 outside", id="y-negative"),
        pytest.param({"x": torch.rand(0, 4), "y": torch.zeros(0).long()}, ValueError, "x", "no samples", id="x-empty"),
        pytest.param(
            {"x_val": torch.ones(5, 4, dtype=torch.long), "y_val": torch.arange(5)},
            TypeError,
            "x_val",
            "floating point",
            id="x_val-int",
        ),
        pytest.param({"x_val": _with_inf(5), "y_val": torch.arange(5)}, ValueError, "x_val", "1 rows", id="x_val-inf"),
        pytest.param(
            {"x_val": torch.rand(5, 3), "y_val": torch.arange(5)}, ValueError, "x_val", "(3,) but 'x'", id="x_val-shape"
        ),
        pytest.param(
            {"x_val": torch.rand(5, 4), "y_val": torch.arange(4)}, ValueError, "y_val", "4 labels", id="yv-len"
        ),
        pytest.param(
            VALID_VAL | {"x_test": torch.rand(3, 2, 2), "y_test": torch.arange(3)},
            ValueError,
            "x_test",
            "per-sample shape (2, 2)",
            id="x_test-shape",
        ),
        pytest.param(
            {"x_test": torch.rand(3, 4), "y_test": torch.tensor([0, 10, 1])},
            ValueError,
            "y_test",
            "label 10 outside [0, 10) (1 sample)",
            id="y_test-range",
        ),
        pytest.param(
            {"y_test": torch.zeros(3), "x_test": torch.rand(3, 4)}, TypeError, "y_test", "integers", id="y_test-float"
        ),
        pytest.param({"feature_blocks": {"a": 2, "b": 1}}, ValueError, "feature_blocks", "sum to 3", id="blocks-sum"),
        pytest.param({"feature_blocks": {"a": 4, "b": 0}}, ValueError, "feature_blocks", "'b'", id="blocks-width"),
        pytest.param(
            {"x": torch.rand(1, 4), "y": torch.zeros(1).long(), "val_fraction": 0.3, "test_fraction": 0.6},
            ValueError,
            "x",
            "none left for training",
            id="train-empty",
        ),
    ],
)
def test_setup_rejects_bad_data_naming_client_and_field(overrides, error, field, detail):
    client = _client(**overrides)  # nothing is checked before setup
    with pytest.raises(error) as raised:
        client.setup("fit")
    message = str(raised.value)
    assert f"client '{CLIENT}'" in message
    assert f"field '{field}'" in message
    assert detail in message


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"num_classes": 0}, "num_classes"),
        ({"val_fraction": 1.0}, "val_fraction"),
        ({"test_fraction": -0.1}, "test_fraction"),
        ({"val_fraction": 0.5, "test_fraction": 0.5}, "test_fraction"),
        ({"batch_size": 0}, "batch_size"),
        ({"eval_batch_size": 0}, "eval_batch_size"),
        ({"x_val": torch.rand(2, 4)}, "y_val"),
        ({"y_test": torch.arange(2)}, "x_test"),
        (VALID_VAL | {"val_fraction": 0.2}, "val_fraction"),
    ],
)
def test_constructor_rejects_bad_arguments(overrides, field):
    with pytest.raises(ValueError, match=f"client '{CLIENT}': field '{field}'"):
        _client(**overrides)


def test_split_is_seeded_disjoint_and_covers_the_data():
    first, again, other = (_client(val_fraction=0.2, test_fraction=0.25, seed=s) for s in (3, 3, 4))
    rows = [first.train_dataset.x[:, 0], first.val_dataset.x[:, 0], first.test_dataset.x[:, 0]]
    assert [len(r) for r in rows] == [11, 4, 5]
    assert sorted(torch.cat(rows).long().tolist()) == list(range(20))
    torch.testing.assert_close(first.train_dataset.x[:, 0], again.train_dataset.x[:, 0])
    torch.testing.assert_close(first.test_dataset.y, again.test_dataset.y)
    assert not torch.equal(first.train_dataset.x[:, 0], other.train_dataset.x[:, 0])
    row_ids = first.train_dataset.x[:, 0].long()
    torch.testing.assert_close(first.train_dataset.y, row_ids % NUM_CLASSES)


def test_explicit_validation_and_test_tensors_are_used_as_given():
    x_test, y_test = torch.rand(3, 4), torch.tensor([1, 2, 3], dtype=torch.int32)
    client = _client(**VALID_VAL, x_test=x_test, y_test=y_test)
    assert client.num_train_samples == 20
    assert client.val_dataset.x is VALID_VAL["x_val"]
    torch.testing.assert_close(client.test_dataset.y, y_test.long())
    assert client.test_dataset.y.dtype == torch.int64


def test_setup_is_idempotent_and_spec_sets_up_lazily():
    client = _client(test_fraction=0.25)
    spec = client.spec  # no explicit setup
    train = client.train_dataset
    client.setup("fit")
    client.setup("test")
    assert client.spec is spec
    assert client.train_dataset is train


def test_spec_describes_the_training_split():
    x = torch.rand(12, 6)
    y = torch.tensor([0, 0, 3, 3, 3, 7, 7, 0, 3, 7, 0, 3])
    client = ClientDataModule(
        "c", x, y, 9, x_val=torch.rand(2, 6), y_val=torch.tensor([8, 8]), feature_blocks={"a": 2, "b": 4}
    )
    spec = client.spec
    assert spec.client_id == "c"
    assert spec.input_shape == (6,)
    assert spec.input_dim == 6
    assert spec.num_classes == 9
    assert spec.classes == (0, 3, 7)
    assert all(type(c) is int for c in spec.classes)
    assert (spec.num_train, spec.num_val, spec.num_test) == (12, 2, 0)
    assert list(spec.feature_blocks.items()) == [("a", 2), ("b", 4)]
    assert client.num_train_samples == 12


def test_image_shaped_features_keep_their_shape():
    client = ClientDataModule("img", torch.rand(10, 1, 4, 4), torch.arange(10) % 2, 2, batch_size=4)
    assert client.spec.input_shape == (1, 4, 4)
    assert client.spec.input_dim == 16
    x, y = next(iter(client.train_dataloader()))
    assert x.shape == (4, 1, 4, 4)
    assert y.shape == (4,)


def test_train_loader_batches_are_shuffled_by_the_global_rng():
    client = _client(batch_size=8)
    loader = client.train_dataloader()
    assert isinstance(loader, TensorBatchLoader)
    sizes = [len(y) for _, y in loader]
    assert sizes == [8, 8, 4]
    torch.manual_seed(11)
    first = torch.cat([x[:, 0] for x, _ in client.train_dataloader()])
    torch.manual_seed(11)
    again = torch.cat([x[:, 0] for x, _ in client.train_dataloader()])
    torch.manual_seed(12)
    other = torch.cat([x[:, 0] for x, _ in client.train_dataloader()])
    torch.testing.assert_close(first, again)
    assert not torch.equal(first, other)
    assert sorted(first.long().tolist()) == list(range(20))


def test_eval_loaders_keep_order_and_use_eval_batch_size():
    client = _client(test_fraction=0.5, eval_batch_size=4)
    batches = list(client.test_dataloader())
    assert [len(y) for _, y in batches] == [4, 4, 2]
    torch.testing.assert_close(torch.cat([x for x, _ in batches]), client.test_dataset.x)
    x, y = batches[0]
    assert x.dtype == torch.float32
    assert y.dtype == torch.int64


def test_empty_eval_splits_give_no_loader():
    client = _client()
    assert client.val_dataloader() == []
    assert client.test_dataloader() == []


def test_tensor_pair_dataset_batches_equal_tensor_dataset_with_default_collate():
    x, y = torch.randn(37, 2, 3), torch.randint(0, 5, (37,))
    ours = DataLoader(TensorPairDataset(x, y), batch_size=8, shuffle=True, collate_fn=collate_batched)
    reference = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    torch.manual_seed(0)
    our_batches = list(ours)
    torch.manual_seed(0)
    reference_batches = list(reference)
    assert len(our_batches) == len(reference_batches) == 5
    for (ox, oy), (rx, ry) in zip(our_batches, reference_batches, strict=True):
        assert isinstance(ox, torch.Tensor)
        torch.testing.assert_close(ox, rx)
        torch.testing.assert_close(oy, ry)


def test_tensor_pair_dataset_indexing_and_length_check():
    x, y = torch.randn(6, 3), torch.arange(6)
    dataset = TensorPairDataset(x, y)
    assert len(dataset) == 6
    torch.testing.assert_close(dataset[2][0], x[2])
    assert dataset[2][1].item() == 2
    gx, gy = dataset.__getitems__([5, 0, 5])
    torch.testing.assert_close(gx, x[[5, 0, 5]])
    assert gy.tolist() == [5, 0, 5]
    with pytest.raises(ValueError, match="5"):
        TensorPairDataset(x, y[:5])
