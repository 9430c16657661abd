import gzip
import urllib.error

import numpy as np
import pytest
import torch

from fedhet.datamodules import CovertypeFederation
from fedhet.datamodules.datasets import WILDERNESS_AREAS, gl_features, load_covertype
from fedhet.datamodules.datasets import covertype as covertype_module
from fedhet.datamodules.datasets.covertype import FEATURE_NAMES, GL_FEATURE_NAMES

from .covtype_fixture import AREA_COVER_TYPES, AREA_ROWS, FIXTURE, make_rows


@pytest.fixture(scope="module")
def table():
    return np.loadtxt(FIXTURE, delimiter=",", dtype=np.int64)


@pytest.fixture(scope="module")
def federation():
    federation = CovertypeFederation(path=str(FIXTURE), num_train=200, num_val=60, download=False)
    federation.setup()
    return federation


def test_fixture_is_reproducible(table):
    np.testing.assert_array_equal(table, make_rows())
    assert table.shape == (400, 55)


def test_loader_moves_the_wilderness_area_out_of_the_features(table):
    data = load_covertype(FIXTURE)
    assert tuple(data.x.shape) == (400, 50)
    assert data.x.dtype == torch.float32
    assert data.feature_names == FEATURE_NAMES
    np.testing.assert_array_equal(data.x.numpy(), np.delete(table[:, :54], np.s_[10:14], axis=1))
    np.testing.assert_array_equal(data.y.numpy(), table[:, 54] - 1)
    assert torch.bincount(data.area).tolist() == list(AREA_ROWS)
    np.testing.assert_array_equal(data.area.numpy(), table[:, 10:14].argmax(1))


def test_gzipped_file_and_environment_folder(tmp_path, monkeypatch, table):
    gz = tmp_path / "covtype.data.gz"
    gz.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    torch.testing.assert_close(load_covertype(gz).x, load_covertype(FIXTURE).x)
    monkeypatch.setenv("FEDHET_DATA", str(tmp_path))
    assert len(load_covertype(download=False).y) == 400


def test_missing_file_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDHET_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_covertype(tmp_path / "nope.data")
    with pytest.raises(FileNotFoundError, match=r"covtype\.data\.gz .*FEDHET_DATA"):
        load_covertype(download=False)

    def offline():
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(covertype_module, "_fetch_with_sklearn", offline)
    with pytest.raises(FileNotFoundError, match="fetch_covtype failed.*archive.ics.uci.edu"):
        load_covertype()


def test_bad_layout(tmp_path, table):
    path = tmp_path / "bad.data"
    np.savetxt(path, table[:, :54], fmt="%d", delimiter=",")
    with pytest.raises(ValueError, match="expected"):
        load_covertype(path)
    two_areas = table.copy()
    two_areas[0, 10:14] = 1
    np.savetxt(path, two_areas, fmt="%d", delimiter=",")
    with pytest.raises(ValueError, match="row 0 does not have exactly one wilderness"):
        load_covertype(path)


def test_four_clients_with_their_own_classes(federation):
    assert federation.client_ids == list(WILDERNESS_AREAS)
    assert federation.num_classes == 7
    for area, covers in zip(WILDERNESS_AREAS, AREA_COVER_TYPES, strict=True):
        spec = federation.specs[area]
        assert spec.input_shape == (50,)
        assert set(spec.classes) <= {c - 1 for c in covers}
    sizes = [sum(len(rows) for rows in parts.values()) for parts in federation.split_rows.values()]
    assert sizes == list(AREA_ROWS)


def test_fixed_splits_follow_file_order(federation, table):
    all_train = np.concatenate([parts["train"] for parts in federation.split_rows.values()])
    all_val = np.concatenate([parts["val"] for parts in federation.split_rows.values()])
    all_test = np.concatenate([parts["test"] for parts in federation.split_rows.values()])
    np.testing.assert_array_equal(np.sort(all_train), np.arange(200))
    np.testing.assert_array_equal(np.sort(all_val), np.arange(200, 260))
    np.testing.assert_array_equal(np.sort(all_test), np.arange(260, 400))
    for area, parts in federation.split_rows.items():
        assert (table[parts["train"], 10 + WILDERNESS_AREAS.index(area)] == 1).all()


def test_standardisation_uses_training_rows_only(federation):
    data = load_covertype(FIXTURE)
    for area, client in federation.clients.items():
        rows = federation.split_rows[area]
        raw_train = data.x[rows["train"]].double()
        mean, scale = raw_train[:, :10].mean(0), raw_train[:, :10].std(0, unbiased=False)
        x_train = client.train_dataset.x.double()
        torch.testing.assert_close(x_train[:, :10], (raw_train[:, :10] - mean) / scale, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(x_train[:, 10:], raw_train[:, 10:])  # soil indicators stay 0/1
        x_test = client.test_dataset.x.double()
        torch.testing.assert_close(
            x_test[:, :10], (data.x[rows["test"], :10].double() - mean) / scale, atol=1e-5, rtol=1e-5
        )


def test_gl_features(federation):
    data = load_covertype(FIXTURE)
    encoded = gl_features(data.x)
    assert tuple(encoded.shape) == (400, 11)
    soil = int(data.x[0, 10:].argmax())
    code = covertype_module.SOIL_ELU_CODES[soil]
    assert encoded[0, 7:].tolist() == [code, code // 1000, code // 100 % 10, 0.0]
    gl = CovertypeFederation(path=str(FIXTURE), features="gl", num_train=200, num_val=60, areas=["neota", "poudre"])
    assert gl.feature_names == GL_FEATURE_NAMES
    assert [spec.input_dim for spec in gl.specs.values()] == [11, 11]
    assert (gl.client("neota").train_dataset.x[:, -1] == 0).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="areas"):
        CovertypeFederation(areas=["rawah", "yosemite"])
    with pytest.raises(ValueError, match="features"):
        CovertypeFederation(features="onehot")
