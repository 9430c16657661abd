"""HybridFederation: the block x class table, evaluation on every class, full-feature samples for the server."""

import pytest
import torch

from fedhet.datamodules import HybridFederation
from fedhet.datamodules.hybrid import digits_quadrants, mfeat_views, synthetic_views

DIGITS_TABLE = {
    "one": {"blocks": ["TL", "TR"], "classes": [0, 1, 2]},
    "two": {"blocks": ["BR", "TL"], "classes": [2, 3]},
}


def test_quadrants_and_views_are_disjoint_column_blocks():
    x, _, blocks = digits_quadrants()
    assert list(blocks) == ["TL", "TR", "BL", "BR"]
    assert blocks["TR"].tolist()[:4] == [4, 5, 6, 7]
    x, y, views = mfeat_views(["kar", "mor"])
    assert x.shape == (2000, 70)
    assert [len(c) for c in views.values()] == [64, 6]
    x, y, views = synthetic_views(num_classes=3, num_views=2, samples_per_class=5, view_dim=4)
    assert x.shape == (15, 8)
    assert torch.bincount(y).tolist() == [5, 5, 5]
    assert torch.equal(synthetic_views(seed=1)[0], synthetic_views(seed=1)[0])


def test_clients_train_on_their_cells_and_are_tested_on_every_class():
    federation = HybridFederation("digits", DIGITS_TABLE, seed=0)
    specs = federation.specs
    assert dict(specs["two"].feature_blocks) == {"TL": 16, "BR": 16}  # the data's block order
    assert specs["one"].classes == (0, 1, 2)
    assert specs["two"].classes == (2, 3)
    x, y, blocks = digits_quadrants()
    two = federation.client("two")
    assert torch.bincount(two.test_dataset.y, minlength=10).min() > 0  # every class
    assert len(two.test_dataset) == len(federation.client("one").test_dataset)
    assert federation.block_widths == {"TL": 16, "TR": 16, "BR": 16}  # BL held by nobody
    data = federation.global_dataloader("test").dataset
    assert data.x.shape[1] == 48
    assert torch.equal(data.x[:, 32:], two.test_dataset.x[:, 16:])  # the same samples, BR columns
    train_rows = {tuple(row.tolist()) for row in two.train_dataset.x}
    assert not train_rows & {tuple(row.tolist()) for row in two.test_dataset.x}


def test_bad_arguments_are_refused_before_reading_data():
    with pytest.raises(ValueError, match="data"):
        HybridFederation("cifar", DIGITS_TABLE)
    with pytest.raises(ValueError, match="assignment"):
        HybridFederation("digits", {})
    with pytest.raises(ValueError, match="test_fraction"):
        HybridFederation("digits", DIGITS_TABLE, val_fraction=0.5, test_fraction=0.5)
