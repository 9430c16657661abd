"""Helpers shared by the dataset loaders: vendored files and their checksums, CSV parsing, splits, standardisation."""

from __future__ import annotations

import gzip
import hashlib
import io
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedhet.core.provenance import note_read

DATA_ENV_VAR = "FEDHET_DATA"
"""Environment variable naming a folder where loaders look for data that is not bundled with fedhet."""

VENDORED_SHA256: dict[str, str] = {
    "cleveland.csv": "238dfb9c74b3e6f3b4515c5a9657a2923d6ca93c0ce5ce942be2d4fa36e372f9",
    "hungarian.csv": "f07c8d164135e5667e1dac1a524a9ce1097773dfcb3ab79fe61ff73328426932",
    "switzerland.csv": "d4ef7f45cb385e94195814623d0b2d0b61966c427dacccd8c386f292307b264c",
    "va.csv": "4b32ff8680f77ab672bbee08f93021d2861c8b4dd21bc18dd2c2f55509369b0d",
    "sa.csv": "b9eec7bafe5fd3d0d756dd65ab720d84439961cfcdd5ee8298532af7f8d4ed63",
    "faisalabad.csv": "36a506981b70072cf54f5306c283c79e5aba7f628f0502188f01f2b8b9542457",
    "mfeat-fou.csv.gz": "d7013cefe3a1ce9b9700e5721961c9277103434e42cb5f7edf943db59a3c3107",
    "mfeat-fac.csv.gz": "dd722f826cd9ccbd8ce3890f1ebc7666c4d30e59687e552fc8937169c2b32280",
    "mfeat-kar.csv.gz": "ac0c4b879c7a74d33f6ec61678eeaac535c3eda7725b353ea482f66243a95514",
    "mfeat-pix.csv.gz": "772b7b3da0cf2c7fde4ba72ebb80a7f4255b2b266d8b20fdc19008fe2b4aefab",
    "mfeat-zer.csv.gz": "b6d96ff0a639ef36e355867a4cb74d8ea4e033a824bbded738787813e0f592cc",
    "mfeat-mor.csv.gz": "895859c43f73dfad860cef225c7f6f6f50cfc2b1f8dad5df548445dd1a9be9e3",
    "vowel.csv": "d38a2dc1173fe7332c114e590d806cd660282e20472c908d720db8b47bd0311f",
    "satellite.csv.gz": "cf437c938b517e44024a39f406e4216aaf41b630feb18c6dd190003e08296f16",
}
"""The sha256 of every file in the package's ``data`` folder, checked each time a file is first read."""


def data_root() -> Path | None:
    """The folder named by the ``FEDHET_DATA`` environment variable, or ``None`` when it is unset or empty."""
    value = os.environ.get(DATA_ENV_VAR, "")
    return Path(value).expanduser() if value else None


def vendored_bytes(name: str) -> bytes:
    """Read a file bundled in ``fedhet/datamodules/datasets/data``, decompressed, after checking its sha256.

    Callers cache what they parse from it; this function reads the file every time.

    Args:
        name: the file name, a key of :data:`VENDORED_SHA256`.

    Returns:
        the file's content, gunzipped when the name ends in ``.gz``.

    Raises:
        KeyError: when ``name`` is not a bundled file.
        OSError: when the file's sha256 differs from the recorded one (a damaged or edited copy).

    """
    expected = VENDORED_SHA256[name]
    source = resources.files(__package__).joinpath("data").joinpath(name)
    raw = source.read_bytes()
    note_read(str(source), raw)
    found = hashlib.sha256(raw).hexdigest()
    if found != expected:
        raise OSError(f"bundled data file '{name}' has sha256 {found}, expected {expected}; reinstall fedhet")
    return gzip.decompress(raw) if name.endswith(".gz") else raw


def parse_csv(content: bytes, *, header: bool, dtype: type[np.generic] = np.float64) -> np.ndarray:
    """Parse a comma-separated table of numbers.

    Args:
        content: the file's text.
        header: whether the first line holds column names (skipped).
        dtype: dtype of the result.

    Returns:
        the table, shape ``(rows, columns)``, read-only.

    """
    table = np.loadtxt(io.BytesIO(content), delimiter=",", skiprows=int(header), dtype=dtype, ndmin=2)
    table.flags.writeable = False
    return table


def holdout_split(n: int, test_fraction: float, val_fraction: float, seed: int) -> tuple[np.ndarray, ...]:
    """Split ``range(n)`` into train, validation and test rows the way scikit-learn's ``train_test_split`` does.

    First ``ceil(test_fraction * n)`` rows go to test, drawn by ``RandomState(seed).permutation(n)``; then
    ``ceil(val_fraction * rest)`` of the remaining rows go to validation, drawn by a fresh
    ``RandomState(seed).permutation``. So ``val_fraction`` is a share of the non-test rows. This equals two calls of
    ``train_test_split(..., shuffle=True, random_state=seed)`` (the Global Layers reference split), row for row.

    Args:
        n: number of rows.
        test_fraction: share of all rows held out for testing, in ``[0, 1)``.
        val_fraction: share of the non-test rows held out for validation, in ``[0, 1)``.
        seed: seed of both permutations.

    Returns:
        ``(train, val, test)`` row indices, ``int64``, in the order they are drawn (not sorted).

    Raises:
        ValueError: when a fraction is outside ``[0, 1)``.

    Example:
        >>> train, val, test = holdout_split(303, 0.33, 0.1, seed=0)
        >>> len(train), len(val), len(test)
        (182, 21, 100)

    """
    for name, value in (("test_fraction", test_fraction), ("val_fraction", val_fraction)):
        if not 0 <= value < 1:
            raise ValueError(f"`{name}` must be in [0, 1), got {value}")
    rows = np.arange(n, dtype=np.int64)
    num_test = math.ceil(test_fraction * n)
    order = np.random.RandomState(seed).permutation(n)
    test, rest = rows[order[:num_test]], rows[order[num_test:]]
    num_val = math.ceil(val_fraction * len(rest))
    order = np.random.RandomState(seed).permutation(len(rest))
    return rest[order[num_val:]], rest[order[:num_val]], test


def fit_standardizer(x: Tensor, observed: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-column mean and scale of ``x`` as scikit-learn's ``StandardScaler`` computes them.

    The scale is the population standard deviation (``ddof=0``); a column with zero variance (or with fewer than one
    observed value) gets scale 1, so it is only centred.

    Args:
        x: the rows to fit on, shape ``(N, F)``, typically a client's training split only.
        observed: ``True`` where ``x`` holds a real value, shape ``(N, F)``; statistics ignore the other cells. All
            cells count when ``None``.

    Returns:
        ``(mean, scale)``, each of shape ``(F,)`` and ``x``'s dtype; a column with no observed value has mean 0.

    Example:
        >>> mean, scale = fit_standardizer(torch.tensor([[1.0, 5.0], [3.0, 5.0]]))
        >>> mean.tolist(), scale.tolist()
        ([2.0, 5.0], [1.0, 1.0])

    """
    x64 = x.double()
    weight = torch.ones_like(x64) if observed is None else observed.double()
    count = weight.sum(dim=0)
    safe = count.clamp(min=1.0)
    mean = (x64 * weight).sum(dim=0) / safe
    variance = (((x64 - mean) ** 2) * weight).sum(dim=0) / safe
    scale = variance.sqrt()
    scale = torch.where((scale > 1e-12) & (count > 0), scale, torch.ones_like(scale))
    return mean.to(x.dtype), scale.to(x.dtype)


def class_shares(labels: np.ndarray, holders: list[list[int]], num_clients: int, seed: int) -> list[np.ndarray]:
    """Deal each class's rows out among the clients that hold that class, in near-equal disjoint shares.

    A class's shares differ by at most one row; the larger ones go to the clients holding the fewest rows so far, so
    clients that hold the same classes end up within one row of each other.

    Args:
        labels: class of every row, shape ``(N,)``.
        holders: for every class value ``c`` (as an index), the clients that hold ``c``; empty to drop the class.
        num_clients: number of clients.
        seed: seed of the ``numpy.random.default_rng`` that shuffles each class's rows.

    Returns:
        one sorted ``int64`` array of rows per client; disjoint.

    Example:
        >>> parts = class_shares(np.array([0, 0, 1, 1, 1, 1]), [[0], [0, 1]], num_clients=2, seed=0)
        >>> [len(part) for part in parts]
        [4, 2]

    """
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    totals = np.zeros(num_clients, dtype=np.int64)
    for value, clients in enumerate(holders):
        if not clients:
            continue
        members = rng.permutation(np.flatnonzero(labels == value))
        smallest_first = sorted(clients, key=lambda client: (totals[client], client))
        for client, share in zip(smallest_first, np.array_split(members, len(clients)), strict=True):
            parts[client].append(share)
            totals[client] += len(share)
    return [np.sort(np.concatenate(part)) if part else np.zeros(0, dtype=np.int64) for part in parts]


def derived_seed(seed: int, index: int) -> int:
    """A per-client seed derived from a federation's ``seed`` and the client's index (as ``DigitsFederation`` does)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


@dataclass(frozen=True)
class ImageData:
    """Labelled single-channel images.

    Attributes:
        x: images, shape ``(N, 1, H, W)``; ``float32`` in ``[0, 1]``, or the stored integers when a loader is asked
            not to scale.
        y: labels, shape ``(N,)``, ``int64``.
        classes: the name of every class, indexed by label.

    """

    x: Tensor
    y: Tensor
    classes: tuple[str, ...]

    @property
    def image_shape(self) -> tuple[int, int]:
        """``(H, W)``."""
        return int(self.x.shape[-2]), int(self.x.shape[-1])
