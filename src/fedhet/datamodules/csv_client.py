"""One client's data from a CSV file, so that a stock ``LightningCLI`` can configure a client from YAML."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.csv_table import as_number, check_label_column, read_site_table


def read_labelled_csv(
    path: str | os.PathLike[str], label_column: str, num_classes: int | None = None
) -> tuple[Tensor, Tensor, list[str]]:
    """Features, labels and feature names of a CSV file with a header row.

    Args:
        path: the file; every column but ``label_column`` is a numeric feature.
        label_column: the name of the column of integer class labels.
        num_classes: size of the label space: every label must be in ``[0, num_classes)``; by default the labels
            present must be ``0..K-1`` (a label is a class, never a size).

    Returns:
        ``x`` of shape ``(N, F)`` (float32), ``y`` of shape ``(N,)`` (int64), and the ``F`` feature names.

    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: in one line naming the file, row and column (``site_b.csv row 17 column 'age': 'abc' is not a
            number``), when the label column is missing, a cell is not a number, a label not an integer, or a label
            outside ``[0, num_classes)`` (by default: labels present that are not ``0..K-1``).

    """
    table = read_site_table(Path(path))
    check_label_column(table, label_column)
    values = []
    for i, row in enumerate(table.cells):
        numbers = [as_number(cell) for cell in row]
        bad = next((j for j, number in enumerate(numbers) if number is None), None)
        if bad is not None:
            raise ValueError(f"{table.where(i, table.columns[bad])}: {row[bad]!r} is not a number")
        values.append(numbers)
    target = table.position[label_column]
    x = torch.tensor(values, dtype=torch.float64).reshape(len(values), len(table.columns))
    y = x[:, target]
    not_integer = (y != y.round()).nonzero().flatten()
    if len(not_integer) > 0:
        i = int(not_integer[0])
        raise ValueError(f"{table.where(i, label_column)}: label {table.cells[i][target]!r} is not an integer")
    present = y.unique()
    bound = len(present) if num_classes is None else num_classes
    outside = ((y < 0) | (y >= bound)).nonzero().flatten()
    if len(outside) > 0:
        i = int(outside[0])
        expected = (
            f"the {len(present)} labels present are not 0..{len(present) - 1}: give num_classes"
            if num_classes is None
            else f"labels must be in [0, {num_classes}) (num_classes)"
        )
        raise ValueError(f"{table.where(i, label_column)}: label {table.cells[i][target]!r} is outside; {expected}")
    names = [name for name in table.columns if name != label_column]
    features = [j for j, name in enumerate(table.columns) if name != label_column]
    return x[:, features].float(), y.long(), names


class CSVClientDataModule(ClientDataModule):
    """A :class:`ClientDataModule` read from a CSV file: every column a numeric feature but the integer label column.

    With it, any fedhet module trains one client from the stock ``LightningCLI`` and a YAML file::

        # fedrep_site_a.yaml; python -c "from lightning.pytorch.cli import LightningCLI; from fedhet.modules import
        # FedRep; from fedhet.datamodules import CSVClientDataModule; LightningCLI(FedRep, CSVClientDataModule)"
        #   fit -c fedrep_site_a.yaml
        model: {hidden_dims: [32], head_epochs: 1}
        data: {path: site_a.csv, label_column: label, num_classes: 3, test_fraction: 0.2}
        trainer: {max_epochs: 4}

    Args:
        path: the CSV file (a header row, then one sample per row).
        label_column: the name of the label column (integers in ``[0, num_classes)``).
        num_classes: size of the label space (default: the number of labels present, which must then be
            ``0..K-1``); a label outside ``[0, num_classes)`` is refused, naming its row.
        client_id: the client's name (default: the file name without its suffix).
        val_fraction: share of the rows split off for validation.
        test_fraction: share of the rows split off for testing.
        batch_size: training batch size.
        seed: seed of the validation/test split.

    """

    def __init__(
        self,
        path: str,
        label_column: str = "label",
        num_classes: int | None = None,
        client_id: str | None = None,
        val_fraction: float = 0.0,
        test_fraction: float = 0.0,
        batch_size: int = 32,
        seed: int = 0,
    ) -> None:
        x, y, self.feature_names = read_labelled_csv(path, label_column, num_classes)
        if num_classes is None:
            num_classes = int(y.max()) + 1 if len(y) else 1  # the labels present are 0..K-1 (checked)
        super().__init__(
            client_id or Path(path).stem,
            x,
            y,
            num_classes,
            val_fraction=val_fraction,
            test_fraction=test_fraction,
            batch_size=batch_size,
            seed=seed,
        )
