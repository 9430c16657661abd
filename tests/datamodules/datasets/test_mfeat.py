import numpy as np
import pytest
import torch

from fedhet.datamodules import MultipleFeaturesFederation
from fedhet.datamodules.datasets import VIEW_WIDTHS, VIEWS, load_mfeat


@pytest.fixture(scope="module")
def mfeat():
    return load_mfeat()


@pytest.fixture(scope="module")
def default_federation():
    federation = MultipleFeaturesFederation()
    federation.setup()
    return federation


def test_views_and_classes(mfeat):
    assert mfeat.view_widths == {"fou": 76, "fac": 216, "kar": 64, "pix": 240, "zer": 47, "mor": 6}
    for x in mfeat.views.values():
        assert x.shape[0] == 2000
        assert x.dtype == torch.float32
    assert mfeat.y.dtype == torch.int64
    assert torch.bincount(mfeat.y).tolist() == [200] * 10
    assert torch.equal(mfeat.y, torch.arange(10).repeat_interleave(200))  # sorted by class


def test_pixel_view_is_a_16x15_image_with_grey_levels_0_to_6(mfeat):
    pix = mfeat.views["pix"]
    assert set(pix.unique().tolist()) == set(range(7))
    ones = pix[mfeat.y == 1].mean(0).reshape(16, 15)
    # a "1" is tall and thin: ink spans more rows than columns
    assert (ones.sum(1) > 1).sum() > (ones.sum(0) > 1).sum()


def test_subset_of_views_in_order():
    data = load_mfeat(["mor", "pix"])
    assert list(data.views) == ["mor", "pix"]
    with pytest.raises(ValueError, match="distinct views"):
        load_mfeat(["pix", "pix"])
    with pytest.raises(ValueError, match="distinct views"):
        load_mfeat(["rgb"])


def test_default_federation_gives_each_client_one_view(default_federation):
    specs = default_federation.specs
    assert default_federation.client_ids == [f"client_{i:03d}" for i in range(6)]
    assert [spec.input_dim for spec in specs.values()] == [76, 216, 64, 240, 47, 6]
    assert [dict(spec.feature_blocks) for spec in specs.values()] == [{view: VIEW_WIDTHS[view]} for view in VIEWS]
    assert default_federation.block_widths == VIEW_WIDTHS
    rows = default_federation.source_indices
    np.testing.assert_array_equal(np.sort(np.concatenate(list(rows.values()))), np.arange(2000))
    for spec in specs.values():
        assert spec.classes == tuple(range(10))
        assert spec.num_train + spec.num_test in (333, 334)


def test_client_features_are_its_views_of_its_rows(default_federation, mfeat):
    client = default_federation.client("client_003")  # pix
    rows = default_federation.source_indices["client_003"]
    labels = torch.cat([client.train_dataset.y, client.test_dataset.y])
    assert torch.equal(labels.sort().values, mfeat.y[rows].sort().values)


def test_standardisation_uses_the_clients_training_rows_only(default_federation, mfeat):
    for index, client in enumerate(default_federation.clients.values()):
        view = VIEWS[index]
        raw = mfeat.views[view][default_federation.source_indices[client.client_id]].double()
        x_train = client.train_dataset.x.double()
        varying = raw.std(0) > 0
        torch.testing.assert_close(x_train.mean(0), torch.zeros_like(x_train[0]), atol=1e-5, rtol=0)
        std = x_train.std(0, unbiased=False)
        torch.testing.assert_close(std[varying & (std > 0)], torch.ones_like(std[varying & (std > 0)]))
        assert client.test_dataset.x.double().mean(0).abs().max() > 1e-3  # test rows were not used to fit


def test_standardisation_matches_a_refit_on_raw_training_rows(mfeat):
    federation = MultipleFeaturesFederation(client_views=[["kar", "mor"]], val_fraction=0.1, test_fraction=0.3, seed=2)
    client = federation.client("client_000")
    parts = federation.split_rows["client_000"]
    assert [len(parts[name]) for name in ("train", "val", "test")] == [1200, 200, 600]
    raw = torch.cat([mfeat.views["kar"], mfeat.views["mor"]], dim=1)
    train = raw[parts["train"]]
    mean, scale = train.mean(0), train.std(0, unbiased=False)
    torch.testing.assert_close(client.train_dataset.x, (train - mean) / scale, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(client.test_dataset.x, (raw[parts["test"]] - mean) / scale, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(client.val_dataset.y, mfeat.y[parts["val"]])


def test_hybrid_clients_hold_lists_of_views_and_classes():
    client_views = [["fou", "fac", "kar"], ["fou", "kar", "pix"], ["fou", "kar"]]
    client_classes = [[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8, 9], [0, 9]]
    federation = MultipleFeaturesFederation(client_views=client_views, client_classes=client_classes, seed=1)
    specs = federation.specs
    assert [list(spec.feature_blocks) for spec in specs.values()] == client_views
    assert [spec.input_dim for spec in specs.values()] == [356, 380, 140]
    assert [list(spec.classes) for spec in specs.values()] == client_classes
    assert federation.block_widths == {"fou": 76, "fac": 216, "kar": 64, "pix": 240}
    rows = list(federation.source_indices.values())
    assert sum(len(r) for r in rows) == 2000
    assert len(np.unique(np.concatenate(rows))) == 2000  # disjoint
    # class 0 is shared by clients 0 and 2, classes 3-5 by 0 and 1, class 9 by 1 and 2: 100 samples each
    assert [len(r) for r in rows] == [800, 1000, 200]


def test_shared_samples():
    federation = MultipleFeaturesFederation(
        client_views=[["fou"], ["zer"]], client_classes=[[0, 1], [1, 2]], disjoint_samples=False
    )
    rows = federation.source_indices
    assert [len(r) for r in rows.values()] == [400, 400]
    assert len(np.intersect1d(rows["client_000"], rows["client_001"])) == 200


def test_deterministic_and_seeded():
    first = MultipleFeaturesFederation(client_views=[["mor"], ["zer"]], seed=7)
    second = MultipleFeaturesFederation(client_views=[["mor"], ["zer"]], seed=7)
    other = MultipleFeaturesFederation(client_views=[["mor"], ["zer"]], seed=8)
    torch.testing.assert_close(first.client("client_001").train_dataset.x, second.client("client_001").train_dataset.x)
    assert not np.array_equal(first.source_indices["client_000"], other.source_indices["client_000"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="client_views"):
        MultipleFeaturesFederation(client_views=[])
    with pytest.raises(ValueError, match=r"client_views\[1\]"):
        MultipleFeaturesFederation(client_views=[["fou"], ["rgb"]])
    with pytest.raises(ValueError, match="lists 1 clients"):
        MultipleFeaturesFederation(client_views=[["fou"], ["fac"]], client_classes=[[0]])
    with pytest.raises(ValueError, match=r"client_classes\[0\]"):
        MultipleFeaturesFederation(client_views=[["fou"]], client_classes=[[10]])
