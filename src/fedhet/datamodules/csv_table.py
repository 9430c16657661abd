"""One site's CSV file as a table of text cells, checked and encoded as numbers for :class:`CSVFederation`.

Every error names the file, the row (the line of the file; the header is row 1) and the column in one sentence, e.g.
``site_b.csv row 17 column 'age': 'abc' is not a number``, so that a bad cell is found before any training.
"""

from __future__ import annotations

import _csv
import csv
import io
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from fedhet.core.provenance import note_read
from fedhet.datamodules.datasets._common import fit_standardizer

ColumnKind = Literal["numeric", "categorical"]
TextPolicy = Literal["refuse", "one_hot"]

MISSING_VALUES: tuple[str, ...] = ("", "NA", "N/A", "n/a", "NaN", "nan", "?")
"""Cells read as missing values by default (after stripping surrounding spaces)."""

MAX_CELL_CHARS = csv.field_size_limit()
"""The longest cell read (Python's ``csv`` field limit, 131,072 characters); a longer one is refused, naming its row."""


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

    @cached_property
    def position(self) -> dict[str, int]:
        """Each column's position in :attr:`columns`, by name (a lookup that does not scan the header)."""
        return {name: j for j, name in enumerate(self.columns)}

    def column(self, name: str) -> list[str]:
        """Every row's cell in column ``name``.

        Args:
            name: a name of :attr:`columns`.

        """
        return list(self._by_column[self.position[name]])

    @cached_property
    def _by_column(self) -> list[tuple[str, ...]]:
        """The cells column by column (one transpose, so that reading a column does not walk every row)."""
        return list(zip(*self.cells, strict=True)) if self.cells else [() for _ in self.columns]


def read_site_table(path: Path) -> SiteTable:
    """Read a CSV file with a header row as text; blank lines are skipped.

    Args:
        path: the file (UTF-8, a byte-order mark allowed).

    Returns:
        its table of text cells.

    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: naming the file (and row) when it cannot be read, is not UTF-8 text (a binary or Latin-1 file),
            has a cell longer than :data:`MAX_CELL_CHARS` or is not CSV, has no header, a column name is empty or
            repeated, or a row has more or fewer cells than the header has columns.

    """
    if not path.is_file():
        raise FileNotFoundError(f"CSV file '{path}' does not exist")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ValueError(f"{path.name}: cannot be read ({err.strerror or err})") from None
    note_read(path, raw)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"{path.name} row {line}: byte {err.start} is not UTF-8 text (a binary file, or text saved in another"
            " encoding such as Latin-1: save it as UTF-8)"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        return _read_rows(path.name, reader)
    except csv.Error as err:
        problem = (
            f"a cell is longer than {MAX_CELL_CHARS:,} characters"
            if "field larger than field limit" in str(err)
            else f"not CSV ({err})"
        )
        raise ValueError(f"{path.name} row {reader.line_num}: {problem}") from None


def _read_rows(name: str, reader: _csv.Reader) -> SiteTable:
    """The header and rows of a ``csv.reader`` over the file ``name``, checked."""
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{name} is empty; a CSV file needs a header row of column names")
    columns = tuple(column.strip() for column in header)
    seen: set[str] = set()
    for j, column in enumerate(columns):
        if not column:
            raise ValueError(f"{name} row 1: column {j + 1} has no name")
        if column in seen:
            raise ValueError(f"{name} row 1: column name {column!r} appears more than once")
        seen.add(column)
    cells, lines = [], []
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        line = reader.line_num
        if len(row) != len(columns):
            raise ValueError(f"{name} row {line}: the header names {len(columns)} columns but this row has {len(row)}")
        cells.append(tuple(cell.strip() for cell in row))
        lines.append(line)
    return SiteTable(name, columns, tuple(cells), tuple(lines))


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
    positions = [table.position[name] for name in columns]
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
    numeric = [name for name, kind in kinds.items() if kind == "numeric"]
    numbers = [[as_number(cell) for cell in table.column(name)] for name in numeric]
    observed = torch.tensor([[v is not None for v in column] for column in numbers], dtype=torch.bool)
    x = torch.tensor([[0.0 if v is None else v for v in column] for column in numbers], dtype=torch.float64)
    observed, x = observed.reshape(len(numeric), len(table.cells)), x.reshape(len(numeric), len(table.cells))
    train = torch.as_tensor(train_rows, dtype=torch.long)
    # Every numeric column at once, each stored contiguously (the transposes are views): each column's sums run in
    # the order they would for that column alone, so the numbers do not depend on how many columns the file has.
    mean, scale = fit_standardizer(x[:, train].T, observed[:, train].T)
    observed, x = observed.T, x.T
    x = torch.where(observed, x, mean)
    x = (x - mean) / scale if standardize else x
    where = {name: k for k, name in enumerate(numeric)}
    blocks: list[Tensor] = []
    names: list[str] = []
    for name, kind in kinds.items():
        if kind == "numeric":
            blocks.append(x[:, where[name] : where[name] + 1])
            names.append(name)
            continue
        cells = table.column(name)
        values = sorted({cells[i] for i in train_rows.tolist()} - set(missing_values))
        codes = np.asarray(cells, dtype=object)[:, None] == np.asarray(values, dtype=object)[None, :]
        blocks.append(torch.from_numpy(codes.reshape(len(cells), len(values))).double())
        names += [f"{name}={value}" for value in values]
    return torch.cat(blocks, dim=1).float(), tuple(names)
