"""A client from a CSV file, and one fedhet module trained from the stock LightningCLI and a YAML file."""

import csv

import pytest
import torch
import yaml
from lightning.pytorch.cli import LightningCLI

from fedhet.datamodules import CSVClientDataModule
from fedhet.datamodules.csv_client import read_labelled_csv
from fedhet.modules import FedRep


def write_csv(path, n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    x = torch.randn(n, 4, generator=g) + 2 * torch.nn.functional.one_hot(y, 4).float()
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["f0", "f1", "label", "f2", "f3"])
        for row, label in zip(x.tolist(), y.tolist(), strict=True):
            writer.writerow([*row[:2], label, *row[2:]])
    return x, y


def test_reads_features_and_labels_in_column_order(tmp_path):
    x, y = write_csv(tmp_path / "site_a.csv")
    features, labels, names = read_labelled_csv(tmp_path / "site_a.csv", "label")
    assert names == ["f0", "f1", "f2", "f3"]
    torch.testing.assert_close(features, x)
    assert torch.equal(labels, y)
    client = CSVClientDataModule(str(tmp_path / "site_a.csv"), test_fraction=0.25)
    client.setup("fit")
    assert client.spec.client_id == "site_a"
    assert client.spec.input_shape == (4,)
    assert client.spec.num_train + client.spec.num_test == 60


def test_bad_files_name_the_file_row_and_column(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("a,b,label\n1,2,0\n3,x,1\n")
    with pytest.raises(ValueError, match=r"^bad.csv row 3 column 'b': 'x' is not a number$"):
        read_labelled_csv(path, "label")
    with pytest.raises(ValueError, match=r"^bad.csv: no label column 'y' \(field 'label_column'\); its columns are"):
        read_labelled_csv(path, "y")
    path.write_text("a,label\n1,0\n2,0.5\n")
    with pytest.raises(ValueError, match=r"^bad.csv row 3 column 'label': label '0.5' is not an integer$"):
        read_labelled_csv(path, "label")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        CSVClientDataModule(str(tmp_path / "missing.csv"))


def test_stock_lightning_cli_trains_a_fedhet_module_from_yaml(tmp_path):
    write_csv(tmp_path / "site_a.csv")
    config = {
        "seed_everything": 0,
        "model": {"hidden_dims": [16], "head_epochs": 1},
        "data": {"path": str(tmp_path / "site_a.csv"), "num_classes": 3, "test_fraction": 0.25, "val_fraction": 0.1},
        "trainer": {
            "max_epochs": 4,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "accelerator": "cpu",
            "default_root_dir": str(tmp_path),
        },  # fmt: skip
    }
    (tmp_path / "fedrep.yaml").write_text(yaml.safe_dump(config))
    cli = LightningCLI(FedRep, CSVClientDataModule, args=["fit", "-c", str(tmp_path / "fedrep.yaml")])
    assert cli.model.client_spec.client_id == "site_a"
    assert cli.trainer.current_epoch == 4
    (result,) = cli.trainer.test(cli.model, cli.datamodule, verbose=False)
    assert result["test/acc"] > 1 / 3  # better than chance on separable blobs
