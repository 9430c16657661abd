"""Statlog Landsat Satellite: 3x3 pixel neighbourhoods in four spectral bands, clients that record different bands.

Source: A. Srinivasan (1993), "Statlog (Landsat Satellite)", UCI Machine Learning Repository
(https://archive.ics.uci.edu/dataset/146/statlog+landsat+satellite), licence CC BY 4.0; original Landsat
Multi-Spectral Scanner data from the Australian Centre for Remote Sensing; used in the StatLog project (D. Michie,
D. J. Spiegelhalter and C. C. Taylor, eds., 1994, *Machine Learning, Neural and Statistical Classification*). The
bundled ``satellite.csv.gz`` is the copy in the R package mlbench (F. Leisch and E. Dimitriadou; Debian package
``r-cran-mlbench``): UCI's training and test files together, 6,435 rows.

Each row is a 3x3 neighbourhood of 80 m pixels seen in the scanner's four bands (green 0.5-0.6 um, red 0.6-0.7 um
and two near-infrared bands, 0.7-0.8 and 0.8-1.1 um), values 0..255, pixel by pixel (row-major) and band by band
within a pixel; the label is the land cover of the central pixel. Six classes occur (UCI's class 6, "mixture", has
no sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.datasets._common import parse_csv, vendored_bytes
from fedhet.datamodules.datasets._views import ViewClientSettings, build_view_clients, resolve_client_classes
from fedhet.datamodules.datasets.mfeat import MultiViewData
from fedhet.datamodules.splits import SplitFederation

BANDS: tuple[str, ...] = ("green", "red", "nir1", "nir2")
"""The four Landsat MSS bands, in the order of the file's columns within a pixel."""

CLASSES: tuple[str, ...] = (
    "red soil",
    "cotton crop",
    "grey soil",
    "damp grey soil",
    "vegetation stubble",
    "very damp grey soil",
)
"""The six land-cover classes, indexed by label (UCI's classes 1, 2, 3, 4, 5 and 7)."""

NUM_PIXELS = 9
NUM_SAMPLES = 6435
NUM_CLASSES = len(CLASSES)


def band_columns(band: str) -> np.ndarray:
    """The nine columns of the 36-column table that hold ``band`` (one per pixel, row-major).

    Example:
        >>> band_columns("red").tolist()
        [1, 5, 9, 13, 17, 21, 25, 29, 33]

    """
    if band not in BANDS:
        raise ValueError(f"unknown band {band!r}; the bands are {list(BANDS)}")
    return np.arange(NUM_PIXELS) * len(BANDS) + BANDS.index(band)


@cache
def _read_table() -> np.ndarray:
    """Parse the bundled file once and check its shape: 6,435 rows of 36 values and a label."""
    table = parse_csv(vendored_bytes("satellite.csv.gz"), header=True)
    expected = (NUM_SAMPLES, NUM_PIXELS * len(BANDS) + 1)
    if table.shape != expected:
        raise OSError(f"bundled satellite.csv.gz has shape {table.shape}, expected {expected}")
    return table


def load_satellite_table() -> tuple[Tensor, Tensor]:
    """The whole table: features ``(6435, 36)`` as ``float32`` values 0..255 in file order, and labels ``(6435,)``."""
    table = _read_table()
    return torch.tensor(table[:, :-1], dtype=torch.float32), torch.tensor(table[:, -1], dtype=torch.int64)


def load_satellite(bands: Sequence[str] = BANDS) -> MultiViewData:
    """Load Statlog Landsat Satellite, bundled with fedhet, one view per spectral band.

    Source: Srinivasan (1993), UCI Machine Learning Repository, CC BY 4.0 (see the module docstring). Values are the
    stored 0..255 (no scaling).

    Args:
        bands: the bands to load, from :data:`BANDS`.

    Returns:
        each band asked for as a view of shape ``(6435, 9)`` (its value at the nine pixels), and the labels
        ``(6435,)`` in ``[0, 6)`` (see :data:`CLASSES`).

    Raises:
        ValueError: for an unknown or repeated band.

    Example:
        >>> data = load_satellite(["red", "nir2"])
        >>> data.view_widths, torch.bincount(data.y).tolist()
        ({'red': 9, 'nir2': 9}, [1533, 703, 1358, 626, 707, 1508])

    """
    _check_bands(bands, "bands")
    x, y = load_satellite_table()
    return MultiViewData(views={band: x[:, band_columns(band)] for band in bands}, y=y)


def _check_bands(bands: Sequence[str], field: str) -> None:
    """Refuse an empty, unknown or repeated list of bands."""
    if not bands or any(band not in BANDS for band in bands) or len(set(bands)) != len(bands):
        raise ValueError(f"`{field}` must list distinct bands from {list(BANDS)}, got {list(bands)}")


class SatelliteFederation(SplitFederation):
    """Landsat neighbourhoods shared among clients whose sensors record different spectral bands, and some classes.

    Client ``k`` holds the bands ``client_bands[k]`` (its feature vector is their concatenation in that order, nine
    values per band, and its :class:`~fedhet.datamodules.ClientSpec` names them as ``feature_blocks``) and the
    samples of the classes ``client_classes[k]``: clients live in different feature spaces of different dimensions
    (FLIC's setting). By default six clients, one per pair of bands, all six classes.

    Every class's samples are shuffled and dealt out in near-equal disjoint shares to the clients holding that class
    (``disjoint_samples``; otherwise each holder gets all of them); each client splits its samples at random into
    train, validation and test parts and, with ``standardize``, standardises every column with the mean and
    deviation of **its own training part only**. Client ids are ``client_000``, ``client_001``...

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        client_bands: one list of bands (from ``green``, ``red``, ``nir1``, ``nir2``) per client.
        client_classes: one list of classes in ``[0, 6)`` per client; every client holds all six when ``None``.
        disjoint_samples: whether clients that hold the same class share its samples out or all get them.
        standardize: whether to standardise each client's features with its training statistics.
        seed: seed of the sharing and of the clients' splits.

    Example:
        >>> federation = SatelliteFederation(client_bands=[["green"], ["red", "nir1"]], client_classes=[[0, 1], [1]])
        >>> [(spec.input_dim, spec.classes) for spec in federation.specs.values()]
        [(9, (0, 1)), (18, (1,))]

    """

    def __init__(
        self,
        client_bands: Sequence[Sequence[str]] = (
            ("green", "red"),
            ("nir1", "nir2"),
            ("green", "nir1"),
            ("red", "nir2"),
            ("green", "nir2"),
            ("red", "nir1"),
        ),
        client_classes: Sequence[Sequence[int]] | None = None,
        disjoint_samples: bool = True,
        standardize: bool = True,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not client_bands:
            raise ValueError("`client_bands` must list at least one client")
        for index, bands in enumerate(client_bands):
            _check_bands(bands, f"client_bands[{index}]")
        self.client_bands = [tuple(bands) for bands in client_bands]
        self.client_classes = resolve_client_classes(client_classes, len(client_bands), NUM_CLASSES)
        self._split_rows: dict[str, dict[str, np.ndarray]] = {}

    @property
    def declared_num_clients(self) -> int:
        """The number of clients, known without reading the data."""
        return len(self.client_bands)

    @property
    def split_rows(self) -> dict[str, dict[str, np.ndarray]]:
        """Each client's rows of the table in its ``"train"``, ``"val"`` and ``"test"`` splits, by client id."""
        self.setup()
        return {client_id: dict(parts) for client_id, parts in self._split_rows.items()}

    def build_clients(self) -> list[ClientDataModule]:
        """Share the samples, then split, standardise and assemble each client's bands.

        Returns:
            the clients ``client_000``, ``client_001``, ...

        """
        config = self.hparams
        data = load_satellite()
        settings = ViewClientSettings.from_config(config)
        clients, self._split_rows = build_view_clients(
            data.views, data.y, NUM_CLASSES, self.client_bands, self.client_classes, settings
        )
        return clients
