"""One client's data from a CSV file, so that a stock ``LightningCLI`` can configure a client from YAML."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule


def read_labelled_csv(path: str | os.PathLike[str], label_column: str) -> tuple[Tensor, Tensor, list[str]]:
    """Features, labels and feature names of a CSV file with a header row.

    Args:
        path: the file; every column but ``label_column`` is a numeric feature.
        label_column: the name of the column of integer class labels.

    Returns:
        ``x`` of shape ``(N, F)`` (float32), ``y`` of shape ``(N,)`` (int64), and the ``F`` feature names.

    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: naming the file, row and column, when the label column is missing or a cell is not a number.

    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CSV file {str(path)!r} does not exist")
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or label_column not in header:
            raise ValueError(
                f"CSV file {str(path)!r}: field 'label_column' is {label_column!r}, not a column of {header}"
            )
        target = header.index(label_column)
        names = [name for i, name in enumerate(header) if i != target]
        features, labels = [], []
        for row_number, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                values = [float(cell) for cell in row]
            except ValueError:
                bad = next(i for i, cell in enumerate(row) if not _is_number(cell))
                raise ValueError(
                    f"CSV file {str(path)!r}, row {row_number}: column {header[bad]!r} holds {row[bad]!r}, not a number"
                ) from None
            label = values.pop(target)
            if label != int(label):
                raise ValueError(f"CSV file {str(path)!r}, row {row_number}: label {label} is not an integer")
            features.append(values)
            labels.append(int(label))
    return torch.tensor(features, dtype=torch.float32), torch.tensor(labels, dtype=torch.int64), names


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


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
        num_classes: size of the label space (default: the largest label plus one).
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
        x, y, self.feature_names = read_labelled_csv(path, label_column)
        if num_classes is None:
            num_classes = int(y.max()) + 1 if len(y) else 1
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
