"""One site's CSV file as a table of text cells, checked and encoded as numbers for :class:`CSVFederation`.

Every error names the file, the row (the line of the file; the header is row 1) and the column in one sentence, e.g.
``site_b.csv row 17 column 'age': 'abc' is not a number``, so that a bad cell is found before any training.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.datasets._common import fit_standardizer

ColumnKind = Literal["numeric", "categorical"]
TextPolicy = Literal["refuse", "one_hot"]

MISSING_VALUES: tuple[str, ...] = ("", "NA", "N/A", "n/a", "NaN", "nan", "?")
"""Cells read as missing values by default (after stripping surrounding spaces)."""


@dataclass(frozen=True)
class SiteTable:
    """A CSV file's header and cells as text, with the line each row was read from.

    Attributes:
        name: the file's name, used in messages.
        columns: the header's column names, in file order.
        cells: the rows' cells, stripped of surrounding spaces; every row has one cell per column.
        lines: the line of the file each row was read from (the header is line 1).

    """

    name: str
    columns: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    lines: tuple[int, ...]

    def where(self, row: int, column: str) -> str:
        """``"<file> row <line> column '<name>'"``, the start of a message about one cell.

        Args:
            row: the row's index in :attr:`cells`.
            column: the column's name.

        """
        return f"{self.name} row {self.lines[row]} column {column!r}"

    def column(self, name: str) -> list[str]:
        """Every row's cell in column ``name``.

        Args:
            name: a name of :attr:`columns`.

        """
        j = self.columns.index(name)
        return [row[j] for row in self.cells]


def read_site_table(path: Path) -> SiteTable:
    """Read a CSV file with a header row as text; blank lines are skipped.

    Args:
        path: the file (UTF-8, a byte-order mark allowed).

    Returns:
        its table of text cells.

    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: naming the file (and row) when it has no header, a column name is empty or repeated, or a row has
            more or fewer cells than the header has columns.

    """
    if not path.is_file():
        raise FileNotFoundError(f"CSV file '{path}' does not exist")
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path.name} is empty; a CSV file needs a header row of column names")
        columns = tuple(name.strip() for name in header)
        for j, name in enumerate(columns):
            if not name:
                raise ValueError(f"{path.name} row 1: column {j + 1} has no name")
            if columns.index(name) != j:
                raise ValueError(f"{path.name} row 1: column name {name!r} appears more than once")
        cells, lines = [], []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(columns):
                raise ValueError(
                    f"{path.name} row {reader.line_num}: the header names {len(columns)} columns but this row has"
                    f" {len(row)}"
                )
            cells.append(tuple(cell.strip() for cell in row))
            lines.append(reader.line_num)
    return SiteTable(path.name, columns, tuple(cells), tuple(lines))


def check_label_column(table: SiteTable, label_column: str) -> None:
    """Refuse a table without the label column.

    Args:
        table: the site's table.
        label_column: the name its label column must have.

    Raises:
        ValueError: naming the file, the field and the file's columns.

    """
    if label_column not in table.columns:
        raise ValueError(
            f"{table.name}: no label column {label_column!r} (field 'label_column'); its columns are"
            f" {list(table.columns)}"
        )


def as_number(cell: str) -> float | None:
    """The cell's finite number, or ``None`` when it holds none (text, ``inf``, ``nan``).

    Args:
        cell: a cell's text.

    """
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def column_kinds(
    table: SiteTable,
    columns: Sequence[str],
    *,
    text: TextPolicy,
    categorical_columns: Collection[str],
    missing_values: Collection[str],
) -> dict[str, ColumnKind]:
    """Decide how each feature column is encoded, refusing a text column unless text is one-hot encoded.

    A column named in ``categorical_columns`` is categorical; otherwise a column whose recorded cells are all numbers
    is numeric, and one whose recorded cells are all text is categorical (with ``text="one_hot"``) or refused. A
    column mixing numbers and text is refused at its first text cell: name it in ``categorical_columns`` to encode it.

    Args:
        table: the site's table.
        columns: the feature columns to decide, in order.
        text: ``"one_hot"`` to encode text columns, ``"refuse"`` to raise on them.
        categorical_columns: columns one-hot encoded whatever their cells hold.
        missing_values: cells that are missing values, not text.

    Returns:
        ``column -> "numeric" | "categorical"``, in the order of ``columns``.

    Raises:
        ValueError: naming the file, row and column of the first text cell of a refused column.

    """
    kinds: dict[str, ColumnKind] = {}
    for name in columns:
        if name in categorical_columns:
            kinds[name] = "categorical"
            continue
        cells = table.column(name)
        recorded = [i for i, cell in enumerate(cells) if cell not in missing_values]
        text_rows = [i for i in recorded if as_number(cells[i]) is None]
        if not text_rows:
            kinds[name] = "numeric"
            continue
        first = text_rows[0]
        if len(text_rows) == len(recorded) and text == "one_hot":
            kinds[name] = "categorical"
            continue
        hint = (
            "set categorical: one_hot to encode text columns, or name it in drop_columns"
            if len(text_rows) == len(recorded)
            else "name the column in categorical_columns to one-hot encode it"
        )
        raise ValueError(f"{table.where(first, name)}: {cells[first]!r} is not a number ({hint})")
    return kinds


def check_no_missing(table: SiteTable, columns: Sequence[str], missing_values: Collection[str]) -> None:
    """Refuse the first missing cell of ``columns``, in file order.

    Args:
        table: the site's table.
        columns: the columns to check.
        missing_values: cells that are missing values.

    Raises:
        ValueError: naming the file, row and column of the first missing cell.

    """
    positions = [table.columns.index(name) for name in columns]
    for i, row in enumerate(table.cells):
        for j in positions:
            if row[j] in missing_values:
                raise ValueError(
                    f"{table.where(i, table.columns[j])}: {row[j]!r} is a missing value (set missing: mean to impute"
                    " missing values from the client's training rows)"
                )


def encode_site(
    table: SiteTable,
    kinds: dict[str, ColumnKind],
    train_rows: np.ndarray,
    *,
    missing_values: Collection[str],
    standardize: bool,
) -> tuple[Tensor, tuple[str, ...]]:
    """Encode a site's feature columns as numbers, with every statistic fitted on its training rows only.

    * a numeric column keeps its name; a missing cell takes the mean of the column's recorded training cells; with
      ``standardize`` the column is then standardised with that mean and the population standard deviation of the
      recorded training cells (scikit-learn's ``StandardScaler``; a constant column is only centred);
    * a categorical column becomes one 0/1 column ``<name>=<value>`` per value seen in the training rows, in sorted
      order (scikit-learn's ``OneHotEncoder(handle_unknown="ignore")``): a value first seen in validation or test
      rows, or a missing cell, is all zeros. One-hot columns are not standardised.

    Args:
        table: the site's table.
        kinds: the feature columns in order and their kinds (:func:`column_kinds`).
        train_rows: indices of the rows statistics are fitted on.
        missing_values: cells that are missing values.
        standardize: whether numeric columns are standardised.

    Returns:
        the features of every row, shape ``(N, F)`` (``float32``), and the ``F`` column names.

    """
    blocks: list[Tensor] = []
    names: list[str] = []
    train = torch.as_tensor(train_rows, dtype=torch.long)
    for name, kind in kinds.items():
        cells = table.column(name)
        if kind == "categorical":
            values = sorted({cells[i] for i in train_rows.tolist()} - set(missing_values))
            codes = np.asarray(cells, dtype=object)[:, None] == np.asarray(values, dtype=object)[None, :]
            blocks.append(torch.from_numpy(codes.reshape(len(cells), len(values))).double())
            names += [f"{name}={value}" for value in values]
            continue
        numbers = [as_number(cell) for cell in cells]
        observed = torch.tensor([v is not None for v in numbers]).unsqueeze(1)
        x = torch.tensor([0.0 if v is None else v for v in numbers], dtype=torch.float64).unsqueeze(1)
        mean, scale = fit_standardizer(x[train], observed[train])
        x = torch.where(observed, x, mean)
        blocks.append((x - mean) / scale if standardize else x)
        names.append(name)
    return torch.cat(blocks, dim=1).float(), tuple(names)
