"""Your own data from YAML: a federation of CSV files, one per site, whose columns may differ from site to site."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.class_summary import count_classes, say_classes
from fedhet.datamodules.client import ClientDataModule, held_out_splits
from fedhet.datamodules.csv_table import (
    MISSING_VALUES,
    SiteTable,
    TextPolicy,
    as_number,
    check_label_column,
    check_no_missing,
    column_kinds,
    encode_site,
    read_site_table,
)
from fedhet.datamodules.datasets._common import derived_seed
from fedhet.datamodules.splits import SplitFederation
from fedhet.functional.partition import split_indices, stratified_split_indices

MissingPolicy = Literal["refuse", "mean"]

BUNDLED_PREFIX = "fedhet:"
"""A path starting with this names a folder of example data bundled with fedhet, e.g. ``fedhet:heart_sites``."""


def resolve_csv_files(files: str | Sequence[str]) -> list[Path]:
    """The CSV files a federation reads: the given files, or every ``*.csv`` file of a folder in name order.

    Args:
        files: a folder, or one file, or a list of files; a path starting with :data:`BUNDLED_PREFIX` is a folder (or
            file) under the example data bundled with fedhet (``fedhet/datamodules/datasets/examples``).

    Returns:
        the files, in the federation's order.

    Raises:
        FileNotFoundError: when a path does not exist or a folder holds no ``.csv`` file.
        ValueError: when no file is given.

    """
    given = [files] if isinstance(files, (str, Path)) else list(files)
    if not given:
        raise ValueError("CSVFederation: field 'files' is empty; give a folder or a list of CSV files")
    paths: list[Path] = []
    for entry in given:
        path = _bundled(entry[len(BUNDLED_PREFIX) :]) if entry.startswith(BUNDLED_PREFIX) else Path(entry).expanduser()
        if path.is_dir():
            found = sorted(path.glob("*.csv"))
            if not found:
                raise FileNotFoundError(f"CSVFederation: folder '{entry}' holds no .csv file")
            paths += found
        elif path.is_file():
            paths.append(path)
        else:
            raise FileNotFoundError(f"CSVFederation: '{entry}' is neither a CSV file nor a folder")
    return paths


def _bundled(name: str) -> Path:
    """The path of ``name`` under the bundled example data (installed as plain files with the package)."""
    return Path(str(resources.files("fedhet.datamodules.datasets").joinpath("examples", *name.split("/"))))


@dataclass(frozen=True)
class _Site:
    """One site read and encoded: all rows' features and labels, and the rows of each split."""

    x: Tensor
    y: Tensor
    feature_names: tuple[str, ...]
    splits: dict[str, np.ndarray]


class CSVFederation(SplitFederation):
    """A federation read from CSV files, one client per file; each file may have its own columns.

    Each file has a header row of column names, then one sample per row. The label column must be in every file;
    every other column is a feature of that site, except those in ``drop_columns``. Client ids are the file names
    without ``.csv``. All files are read and checked when the federation is constructed, so that a bad cell ends a
    command before any training, with one line naming the file, row (the line of the file; the header is row 1) and
    column::

        ValueError: site_b.csv row 17 column 'age': 'abc' is not a number (name the column in categorical_columns ...)

    Each site is split into train, validation and test rows (seeded per site; stratified by label where the classes
    are large enough), then encoded with statistics of **its own training rows only**: numeric columns standardised
    (mean and population standard deviation, as scikit-learn's ``StandardScaler``), text columns one-hot encoded as
    ``<column>=<value>`` (values seen in training rows; others all zeros) or refused, missing cells refused or
    imputed by the training mean. Column names travel with the data as :attr:`feature_names`, so
    :class:`~fedhet.datamodules.aligned.AlignedFederation` can place every site in the union of the columns.

    Labels: the labels present in the files are numbered in sorted order (integers in numeric order, so labels
    ``0..C-1`` keep their values; ``yes``/``no``, ``benign``/``malignant`` in text order), or in the order ``classes``
    gives, and then a label outside ``classes`` is refused naming its file, row and column. :attr:`classes` holds each
    class index's label. A federation prints each site's classes with their counts when it is built, and warns in one
    line about a class found at one site only, in under 1 % of its rows (a typo such as ``2`` in a 0/1 column):
    give ``classes`` to refuse such a label instead.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        files: a folder (every ``*.csv`` in it, in name order), or a list of CSV files; a path starting with
            ``fedhet:`` names example data bundled with fedhet (``fedhet:heart_sites``).
        label_column: the column of class labels, in every file.
        drop_columns: columns that are not features (ids, dates...), dropped wherever they appear; each must appear
            in some file.
        categorical: what to do with a column of text: ``"refuse"`` (an error naming its first text cell) or
            ``"one_hot"``.
        categorical_columns: columns one-hot encoded even though they hold numbers (codes such as ``1..4``).
        missing: what to do with a missing cell: ``"refuse"`` (an error naming it) or ``"mean"`` (numeric: the mean
            of the column's training rows; categorical: all zeros). A missing label is always refused.
        missing_values: the cells that count as missing.
        classes: the labels in class-index order (text or integers); by default as described above.
        standardize: whether numeric columns are standardised.
        val_fraction: share of each site's rows held out for validation.
        test_fraction: share of each site's rows held out for testing.
        stratify: whether the splits keep each site's class proportions (where the classes are large enough).
        seed: seed of the splits (each site draws from its own seed derived from it).

    Raises:
        FileNotFoundError: when a file or folder does not exist.
        ValueError: naming the file, row and column of a bad cell, or the field of a bad option.

    Example:
        >>> federation = CSVFederation("fedhet:heart_sites", label_column="disease", drop_columns=["record"],
        ...                            categorical="one_hot")
        >>> federation.client_ids, federation.specs["switzerland"].input_dim
        (['cleveland', 'hungarian', 'switzerland', 'va'], 17)
        >>> federation.feature_names["va"][:4]
        ('age', 'sex=female', 'sex=male', 'cp=asymptomatic')

    """

    def __init__(
        self,
        files: str | Sequence[str],
        label_column: str = "label",
        drop_columns: Sequence[str] = (),
        categorical: TextPolicy = "refuse",
        categorical_columns: Sequence[str] = (),
        missing: MissingPolicy = "refuse",
        missing_values: Sequence[str] = MISSING_VALUES,
        classes: Sequence[str | int] | None = None,
        standardize: bool = True,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        stratify: bool = True,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if categorical not in ("refuse", "one_hot"):
            raise ValueError(f"CSVFederation: field 'categorical' must be 'refuse' or 'one_hot', got {categorical!r}")
        if missing not in ("refuse", "mean"):
            raise ValueError(f"CSVFederation: field 'missing' must be 'refuse' or 'mean', got {missing!r}")
        tables = [read_site_table(path) for path in resolve_csv_files(files)]
        self._check_ids_and_columns(tables, label_column, drop_columns)
        labels = [self._labels(table, label_column, missing_values) for table in tables]
        self.classes: tuple[str, ...] = _class_order(tables, labels, label_column, classes)
        index = {label: k for k, label in enumerate(self.classes)}
        fractions = (1.0 - val_fraction - test_fraction, val_fraction, test_fraction)
        self._sites: dict[str, _Site] = {}
        for k, (table, site_labels) in enumerate(zip(tables, labels, strict=True)):
            features = [name for name in table.columns if name != label_column and name not in drop_columns]
            if not features:
                raise ValueError(f"{table.name}: no feature column is left besides the label and drop_columns")
            kinds = column_kinds(
                table,
                features,
                text=categorical,
                categorical_columns=set(categorical_columns),
                missing_values=set(missing_values),
            )
            if missing == "refuse":
                check_no_missing(table, features, set(missing_values))
            y = np.array([index[label] for label in site_labels], dtype=np.int64)
            site_seed = derived_seed(seed, k)
            if stratify:
                train, val, test = stratified_split_indices(y, fractions, site_seed)
            else:
                train, val, test = split_indices(len(y), fractions, site_seed)
            x, names = encode_site(table, kinds, train, missing_values=set(missing_values), standardize=standardize)
            self._sites[Path(table.name).stem] = _Site(
                x, torch.from_numpy(y), names, {"train": train, "val": val, "test": test}
            )
        say_classes("CSVFederation", self.class_counts, warn_rare=classes is None)

    @property
    def class_counts(self) -> dict[str, dict[str, int]]:
        """Each client's rows (all splits) per class label, the classes it holds only, in class-index order."""
        return count_classes({client_id: site.y.numpy() for client_id, site in self._sites.items()}, self.classes)

    @property
    def declared_num_clients(self) -> int:
        """One client per file, known once the files are read (on construction)."""
        return len(self._sites)

    @property
    def feature_names(self) -> dict[str, tuple[str, ...]]:
        """Each client's encoded column names, in feature order, by client id."""
        return {client_id: site.feature_names for client_id, site in self._sites.items()}

    @property
    def split_rows(self) -> dict[str, dict[str, np.ndarray]]:
        """Each client's data rows (0 = the first row after the header) in its train, val and test splits."""
        return {client_id: dict(site.splits) for client_id, site in self._sites.items()}

    def build_clients(self) -> list[ClientDataModule]:
        """One client per file, in the order the files were given.

        Returns:
            the clients, their validation and test rows given as tensors.

        """
        clients = []
        for client_id, site in self._sites.items():
            part = {name: torch.from_numpy(rows) for name, rows in site.splits.items()}
            clients.append(
                ClientDataModule(
                    client_id,
                    site.x[part["train"]],
                    site.y[part["train"]],
                    len(self.classes),
                    batch_size=self.batch_size,
                    eval_batch_size=self.eval_batch_size,
                    seed=self.seed,
                    **held_out_splits(
                        (site.x[part["val"]], site.y[part["val"]]), (site.x[part["test"]], site.y[part["test"]])
                    ),
                )
            )
        return clients

    @staticmethod
    def _check_ids_and_columns(tables: list[SiteTable], label_column: str, drop_columns: Sequence[str]) -> None:
        """Refuse repeated client ids, a file without the label column, an empty file and unknown drop_columns."""
        seen: dict[str, str] = {}
        for table in tables:
            client_id = Path(table.name).stem
            if client_id in seen:
                raise ValueError(f"CSVFederation: two files are named {table.name!r}; client ids must be unique")
            seen[client_id] = table.name
            check_label_column(table, label_column)
            if not table.cells:
                raise ValueError(f"{table.name}: no data rows below the header")
        if label_column in drop_columns:
            raise ValueError(f"CSVFederation: field 'drop_columns' names the label column {label_column!r}")
        unknown = [name for name in drop_columns if not any(name in table.columns for table in tables)]
        if unknown:
            raise ValueError(f"CSVFederation: field 'drop_columns' names {unknown}, which no file has")

    @staticmethod
    def _labels(table: SiteTable, label_column: str, missing_values: Sequence[str]) -> list[str]:
        """The label column's cells, an integer-valued number written as that integer; a missing label refused."""
        labels = []
        for i, cell in enumerate(table.column(label_column)):
            if cell in missing_values:
                raise ValueError(f"{table.where(i, label_column)}: the label is missing; every row needs one")
            number = as_number(cell)
            labels.append(str(int(number)) if number is not None and number == int(number) else cell)
        return labels


def _class_order(
    tables: list[SiteTable], labels: list[list[str]], label_column: str, classes: Sequence[str | int] | None
) -> tuple[str, ...]:
    """Each class index's label: ``classes`` as given, else the labels present, integers in numeric order.

    An integer label is a class name like any other, never a size: labels ``0, 1, 1000000000`` make three classes.
    """
    if classes is not None:
        known = {str(label) for label in classes}
        if len(known) != len(classes) or not known:
            raise ValueError(f"CSVFederation: field 'classes' must name each label once, got {list(classes)}")
        for table, site_labels in zip(tables, labels, strict=True):
            for i, label in enumerate(site_labels):
                if label not in known:
                    raise ValueError(
                        f"{table.where(i, label_column)}: label {label!r} is not one of classes {list(classes)}"
                    )
        return tuple(str(label) for label in classes)
    distinct = {label for site_labels in labels for label in site_labels}
    if all(_is_integer(label) for label in distinct):  # the classes present in numeric order; never range(max + 1)
        return tuple(sorted(distinct, key=int))
    return tuple(sorted(distinct))


def _is_integer(label: str) -> bool:
    return re.fullmatch(r"-?[0-9]+", label) is not None
