"""UCI Covertype split into four clients by wilderness area (Roosevelt National Forest, Colorado).

Source: J. A. Blackard (1998), "Covertype", UCI Machine Learning Repository
(https://archive.ics.uci.edu/dataset/31/covertype); Blackard and Dean (1999), "Comparative accuracies of artificial
neural networks and discriminant analysis in predicting forest cover types from cartographic variables", Computers
and Electronics in Agriculture 24(3). Copyright Jock A. Blackard and Colorado State University; reuse is unlimited
with retention of this copyright notice (the UCI site lists CC BY 4.0).

Not bundled (11 MB gzipped): give the path of ``covtype.data`` or ``covtype.data.gz`` (581,012 rows, no header, 54
feature columns and the cover type), put it in ``$FEDHET_DATA/``, or let scikit-learn's ``fetch_covtype`` download
it when the machine is online.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.core.provenance import note_read
from fedhet.datamodules.client import ClientDataModule, held_out_splits
from fedhet.datamodules.datasets._common import data_root, fit_standardizer, parse_csv
from fedhet.datamodules.splits import SplitFederation

WILDERNESS_AREAS: tuple[str, ...] = ("rawah", "neota", "comanche", "poudre")
"""The four wilderness areas, in the order of their one-hot columns: Rawah, Neota, Comanche Peak, Cache la Poudre."""

COVER_TYPES: tuple[str, ...] = (
    "Spruce/Fir",
    "Lodgepole Pine",
    "Ponderosa Pine",
    "Cottonwood/Willow",
    "Aspen",
    "Douglas-fir",
    "Krummholz",
)
"""The seven cover types; label ``k`` is the file's cover type ``k + 1``."""

QUANTITATIVE: tuple[str, ...] = (
    "elevation",
    "aspect",
    "slope",
    "horizontal_distance_to_hydrology",
    "vertical_distance_to_hydrology",
    "horizontal_distance_to_roadways",
    "hillshade_9am",
    "hillshade_noon",
    "hillshade_3pm",
    "horizontal_distance_to_fire_points",
)
"""The ten quantitative columns, in file order."""

SOIL_ELU_CODES: tuple[int, ...] = (
    2702, 2703, 2704, 2705, 2706, 2717, 3501, 3502, 4201, 4703, 4704, 4744, 4758, 5101, 5151, 6101, 6102, 6731, 7101,
    7102, 7103, 7201, 7202, 7700, 7701, 7702, 7709, 7710, 7745, 7746, 7755, 7756, 7757, 7790, 8703, 8707, 8708, 8771,
    8772, 8776,
)  # fmt: skip
"""The USFS Ecological Landtype Unit code of each of the 40 soil-type columns; first digit = climatic zone, second =
geologic zone."""

FEATURE_NAMES: tuple[str, ...] = (*QUANTITATIVE, *(f"soil_{code}" for code in SOIL_ELU_CODES))
"""The 50 feature columns :func:`load_covertype` returns: the file's columns without the four wilderness columns."""

GL_FEATURE_NAMES: tuple[str, ...] = (
    "elevation",
    "aspect",
    "slope",
    "horizontal_distance_to_hydrology",
    "vertical_distance_to_hydrology",
    "horizontal_distance_to_roadways",
    "horizontal_distance_to_fire_points",
    "soil_type",
    "climate_zone",
    "geologic_zone",
    "wilderness_code",
)
"""The 11 columns of ``features="gl"``, as the Global Layers reference encodes them."""

_NUM_COLUMNS = 55
_WILDERNESS = slice(10, 14)
_SOIL = slice(14, 54)


@dataclass(frozen=True)
class CovertypeData:
    """Covertype rows, with the wilderness area taken out of the features.

    Attributes:
        x: features, shape ``(N, 50)``, ``float32``: the 10 quantitative columns, then the 40 soil-type indicators
            (see :data:`FEATURE_NAMES`).
        y: labels, shape ``(N,)``, ``int64``, the cover type minus one (0..6, see :data:`COVER_TYPES`).
        area: each row's wilderness area, shape ``(N,)``, ``int64``, an index into :data:`WILDERNESS_AREAS`.

    """

    x: Tensor
    y: Tensor
    area: Tensor

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The names of the 50 feature columns."""
        return FEATURE_NAMES


def _parse_table(path: Path) -> np.ndarray:
    """Read a headerless integer CSV, gzipped or not, into an ``int32`` array."""
    raw = path.read_bytes()
    note_read(path, raw)
    return parse_csv(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw, header=False, dtype=np.int32)


def _default_paths() -> list[Path]:
    """Where :func:`load_covertype` looks when given no path."""
    root = data_root()
    if root is None:
        return []
    return [root / folder / name for folder in ("", "covertype") for name in ("covtype.data.gz", "covtype.data")]


def _fetch_with_sklearn() -> np.ndarray:
    """Load Covertype through ``sklearn.datasets.fetch_covtype`` (downloads once, then reads its cache)."""
    from sklearn.datasets import fetch_covtype

    bunch = fetch_covtype(shuffle=False)
    return np.column_stack([bunch.data, bunch.target]).astype(np.int32)


def load_covertype(path: str | os.PathLike[str] | None = None, download: bool = True) -> CovertypeData:
    """Load UCI Covertype, with the wilderness area as a row attribute instead of four one-hot features.

    Source: Blackard (1998), UCI Machine Learning Repository; copyright Jock A. Blackard and Colorado State
    University (see the module docstring). The full file has 581,012 rows: Rawah 260,796, Neota 29,884, Comanche Peak
    253,364, Cache la Poudre 36,968. Rows keep the file's order (its first 11,340 rows are the customary
    class-balanced training set, the next 3,780 the validation set).

    Args:
        path: ``covtype.data`` or ``covtype.data.gz`` (UCI format: no header, 55 integer columns). When ``None``,
            ``$FEDHET_DATA/covtype.data[.gz]`` or ``$FEDHET_DATA/covertype/covtype.data[.gz]``, else scikit-learn's
            ``fetch_covtype`` (cache in ``~/scikit_learn_data``, or a download) when ``download``.
        download: whether to fall back on ``fetch_covtype`` when no file is found.

    Returns:
        features ``(N, 50)``, labels ``(N,)`` in 0..6 and wilderness areas ``(N,)`` in 0..3.

    Raises:
        FileNotFoundError: when ``path`` does not exist, or no file is found and the download is off or fails; the
            message says where to put the file.
        ValueError: when the table does not have the UCI layout.

    """
    hint = (
        "download covtype.data.gz from https://archive.ics.uci.edu/dataset/31/covertype and pass its path"
        " (`path=` / `--data.init_args.path`), or put it in $FEDHET_DATA/"
    )
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"Covertype file {path} does not exist; {hint}, or leave the path unset")
        table = _parse_table(Path(path))
    else:
        found = next((candidate for candidate in _default_paths() if candidate.is_file()), None)
        if found is not None:
            table = _parse_table(found)
        else:
            if not download:
                raise FileNotFoundError(f"Covertype data not found; {hint}")
            try:
                table = _fetch_with_sklearn()
            except Exception as error:  # network errors take many forms (URLError, HTTPError, OSError, ...)
                raise FileNotFoundError(
                    f"Covertype data not found locally and scikit-learn's fetch_covtype failed ({error!r}); {hint}"
                ) from error
    return _split_table(table)


def _split_table(table: np.ndarray) -> CovertypeData:
    """Check the UCI layout and separate features, labels and wilderness areas."""
    if table.ndim != 2 or table.shape[1] != _NUM_COLUMNS:
        raise ValueError(f"Covertype table has shape {table.shape}; expected (rows, {_NUM_COLUMNS})")
    wilderness, soil, cover = table[:, _WILDERNESS], table[:, _SOIL], table[:, -1]
    for name, block in (("wilderness", wilderness), ("soil", soil)):
        bad = np.flatnonzero((block.sum(axis=1) != 1) | (block.min(axis=1) < 0) | (block.max(axis=1) > 1))
        if len(bad):
            raise ValueError(f"Covertype row {int(bad[0])} does not have exactly one {name} column set to 1")
    if cover.min() < 1 or cover.max() > len(COVER_TYPES):
        raise ValueError(f"Covertype cover types must be in 1..7, found {cover.min()}..{cover.max()}")
    features = np.concatenate([table[:, :10], soil], axis=1).astype(np.float32)
    return CovertypeData(
        x=torch.from_numpy(features),
        y=torch.from_numpy(cover.astype(np.int64) - 1),
        area=torch.from_numpy(wilderness.argmax(axis=1).astype(np.int64)),
    )


def gl_features(x: Tensor) -> Tensor:
    """Re-encode :func:`load_covertype` features as the Global Layers reference's 11 columns (before scaling).

    Columns (:data:`GL_FEATURE_NAMES`): the 7 quantitative columns without the hillshades; the soil type's ELU code
    (e.g. 7102) and its first and second digits (climatic and geologic zone), as numbers; and a constant 0 where the
    reference keeps an ordinal-encoded wilderness area that is constant within a client.

    Args:
        x: features of shape ``(N, 50)``.

    Returns:
        features of shape ``(N, 11)``, ``float32``.

    """
    codes = torch.tensor(SOIL_ELU_CODES, dtype=torch.float32)[x[:, 10:].argmax(dim=1)]
    kept = x[:, [0, 1, 2, 3, 4, 5, 9]]
    zones = torch.stack(
        [codes, torch.div(codes, 1000, rounding_mode="floor"), torch.div(codes, 100, rounding_mode="floor") % 10], 1
    )
    return torch.cat([kept, zones, torch.zeros(len(x), 1)], dim=1)


class _CovertypeConfig(Protocol):
    """The arguments :class:`CovertypeFederation` keeps in ``self.hparams`` (read by attribute)."""

    path: str | None
    features: Literal["raw", "gl"]
    standardize: bool
    num_train: int
    num_val: int
    download: bool
    batch_size: int
    eval_batch_size: int
    seed: int


class CovertypeFederation(SplitFederation):
    """Covertype with one client per wilderness area: natural feature and label shift, fixed UCI splits.

    Rows are split in file order as customary (and as Global Layers does): the first ``num_train`` rows (11,340,
    class-balanced) are training rows, the next ``num_val`` (3,780) validation rows, the rest (565,892) test rows;
    each client takes the rows of its area from each part. With the full file the clients are:

    ============  =====  =====  =======  =====================
    client        train  val    test     classes (labels 0-6)
    ============  =====  =====  =======  =====================
    ``rawah``     2,675  922    257,199  0 1 4 6
    ``neota``     386    113    29,385   0 1 6
    ``comanche``  4,771  1,578  247,015  0 1 2 4 5 6
    ``poudre``    3,508  1,167  32,293   1 2 3 5
    ============  =====  =====  =======  =====================

    Labels are global (the cover type minus one, ``num_classes`` = 7); a method that wants local labels maps each
    client's :attr:`~fedhet.datamodules.ClientSpec.classes`. Features:

    * ``"raw"`` (50 columns): the 10 quantitative columns, standardised, then the 40 soil indicators as 0/1;
    * ``"gl"`` (11 columns, :func:`gl_features`): the Global Layers reference's encoding, all standardised except
      the constant wilderness column.

    Standardisation statistics come from **the client's own training rows only**.

    ``batch_size``, ``eval_batch_size`` and ``seed`` are split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there (the held-out parts are counts, not shares);
    below, only what they mean here.

    Args:
        path: the UCI file (see :func:`load_covertype`); found in ``$FEDHET_DATA`` or fetched when ``None``.
        areas: the wilderness areas to include, from :data:`WILDERNESS_AREAS`.
        features: ``"raw"`` or ``"gl"``.
        standardize: whether to standardise the quantitative columns with the client's training statistics.
        num_train: number of leading rows that form the training part.
        num_val: number of rows after them that form the validation part.
        download: whether :func:`load_covertype` may fall back on scikit-learn's download.
        seed: seed handed to the clients (their splits are fixed, so it has no effect on the data).

    """

    def __init__(
        self,
        path: str | None = None,
        areas: Sequence[str] = WILDERNESS_AREAS,
        features: Literal["raw", "gl"] = "raw",
        standardize: bool = True,
        num_train: int = 11340,
        num_val: int = 3780,
        download: bool = True,
        batch_size: int = 256,
        eval_batch_size: int = 4096,
        seed: int = 0,
    ) -> None:
        super().__init__()
        unknown = [area for area in areas if area not in WILDERNESS_AREAS]
        if unknown or not areas or len(set(areas)) != len(areas):
            raise ValueError(f"`areas` must list distinct areas from {list(WILDERNESS_AREAS)}, got {list(areas)}")
        if features not in ("raw", "gl"):
            raise ValueError(f"`features` must be 'raw' or 'gl', got {features!r}")
        if num_train < 1 or num_val < 0:
            raise ValueError(f"`num_train` must be at least 1 and `num_val` non-negative, got {num_train}, {num_val}")
        self.areas = tuple(areas)
        self._split_rows: dict[str, dict[str, np.ndarray]] = {}

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The names of every client's feature columns."""
        return GL_FEATURE_NAMES if cast(_CovertypeConfig, self.hparams).features == "gl" else FEATURE_NAMES

    @property
    def split_rows(self) -> dict[str, dict[str, np.ndarray]]:
        """Each client's rows of :func:`load_covertype` in its ``"train"``, ``"val"`` and ``"test"`` parts, by area."""
        self.setup()
        return {area: dict(parts) for area, parts in self._split_rows.items()}

    def build_clients(self) -> list[ClientDataModule]:
        """Load the table, cut it into the fixed parts and each part by area, and encode every client.

        Returns:
            one client per area, in the order of ``areas``.

        """
        config = cast(_CovertypeConfig, self.hparams)
        data = load_covertype(config.path, download=config.download)
        x = gl_features(data.x) if config.features == "gl" else data.x
        scaled = slice(0, 10)  # "raw": the quantitative columns; "gl": all but the constant wilderness column
        position = torch.arange(len(data.y))
        part_of = torch.where(
            position < config.num_train, 0, torch.where(position < config.num_train + config.num_val, 1, 2)
        )
        clients = []
        for area in self.areas:
            in_area = data.area == WILDERNESS_AREAS.index(area)
            rows = {
                name: torch.nonzero(in_area & (part_of == k)).flatten()
                for k, name in enumerate(("train", "val", "test"))
            }
            self._split_rows[area] = {name: part.numpy() for name, part in rows.items()}
            features = {name: x[part].clone() for name, part in rows.items()}
            if config.standardize:
                mean, scale = fit_standardizer(features["train"][:, scaled])
                for part in features.values():
                    part[:, scaled] = (part[:, scaled] - mean) / scale
            held_out = held_out_splits((features["val"], data.y[rows["val"]]), (features["test"], data.y[rows["test"]]))
            clients.append(
                ClientDataModule(
                    area,
                    features["train"],
                    data.y[rows["train"]],
                    len(COVER_TYPES),
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=config.seed,
                    **held_out,
                )
            )
        return clients
