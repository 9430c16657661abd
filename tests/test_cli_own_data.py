"""Your own data for HyFEM's feature blocks and FedDaDiL's domains, from YAML through ``fedhet fit``.

HyFEM's ``HybridFederation`` took only registered dataset names, and FedDaDiL's domains needed the private
``_DomainFederation``; a subclass of a federation that missed an argument failed under the CLI with "...has no
'client_ids'", the real cause hidden.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from fedhet.cli import main
from fedhet.datamodules import DomainFederation, HybridFederation

BLOCKS = {"lab": ["age", "bp"], "scan": ["s1", "s2", "s3"], "notes": ["n1"]}
ASSIGNMENT = {
    "clinic_a": {"blocks": ["lab", "scan"], "classes": [0, 1]},
    "clinic_b": {"blocks": ["scan", "notes"], "classes": [1, 2]},
    "clinic_c": {"blocks": ["lab", "notes"], "classes": [0, 2]},
}


@pytest.fixture(autouse=True)
def _argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["fedhet"])


def _write(path: Path, header: list[str], rows: np.ndarray, labels: np.ndarray) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*header, "y"])
        writer.writerows([[*(f"{v:.4f}" for v in row), int(label)] for row, label in zip(rows, labels, strict=True)])


def pooled_blocks(n: int = 180, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Three classes whose means differ in every column; the columns of :data:`BLOCKS`."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    columns = [name for block in BLOCKS.values() for name in block]
    x = rng.normal(size=(n, len(columns))) + 2.0 * y[:, None]
    return x, y, columns


def blocks_loader(n: int = 180) -> tuple[torch.Tensor, torch.Tensor, dict[str, list[int]]]:
    """The same samples as arrays, for ``data: "tests.test_cli_own_data:blocks_loader"``."""
    x, y, columns = pooled_blocks(n)
    where = {name: j for j, name in enumerate(columns)}
    return torch.as_tensor(x), torch.as_tensor(y), {b: [where[c] for c in cols] for b, cols in BLOCKS.items()}


def domains_loader(shift: float = 3.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Two labelled sources and a target, two 2-d classes moved by ``shift`` per domain."""
    rng = np.random.default_rng(1)
    out = {}
    for k, name in enumerate(("source_a", "source_b", "target")):
        y = np.arange(60) % 2
        out[name] = (rng.normal(size=(60, 2)) + 4.0 * y[:, None] + k * shift * np.array([1.0, 0.0]), y)
    return out


def _fit(tmp_path: Path, model: dict[str, Any], data: dict[str, Any], rounds: int = 2) -> dict[str, str]:
    root = tmp_path / "run"
    config = {
        "model": model,
        "data": data,
        "trainer": {"rounds": rounds, "seed": 0, "default_root_dir": str(root), "reporting": {"progress_bar": False}},
    }
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    main(["fit", "-c", str(path)])
    (metrics,) = root.glob("version_*/metrics.csv")
    rows = list(csv.DictReader(metrics.open()))
    return {key: value for key, value in rows[-1].items() if value != ""}


HYFEM = {"class_path": "fedhet.modules.HyFEM", "init_args": {"extractor_dims": [8], "hidden_dim": 8, "lr": 0.1}}


@pytest.mark.parametrize("source", ["csv", "loader"])
def test_hyfem_runs_on_your_own_feature_blocks_from_yaml(tmp_path: Path, source: str) -> None:
    if source == "csv":
        x, y, columns = pooled_blocks()
        _write(tmp_path / "pooled.csv", columns, x, y)
        init = {
            "data": "csv",
            "data_args": {"path": str(tmp_path / "pooled.csv"), "blocks": BLOCKS, "label_column": "y"},
        }
    else:
        init = {"data": "tests.test_cli_own_data:blocks_loader", "data_args": {"n": 180}}
    data = {"class_path": "fedhet.datamodules.HybridFederation", "init_args": {**init, "assignment": ASSIGNMENT}}
    metrics = _fit(tmp_path, HYFEM, data)
    assert int(float(metrics["round"])) == 1
    for client in ASSIGNMENT:
        assert 0.0 <= float(metrics[f"val/acc/{client}"]) <= 1.0
    federation = HybridFederation(**{**init, "assignment": ASSIGNMENT})
    assert federation.block_widths == {"lab": 2, "scan": 3, "notes": 1}
    assert dict(federation.specs["clinic_b"].feature_blocks) == {"scan": 3, "notes": 1}


FEDDADIL = {
    "class_path": "fedhet.modules.FedDaDiL",
    "init_args": {"num_atoms": 2, "atom_size": 16, "batch_size": 16, "target": "target", "optimizer": "adam"},
}


@pytest.mark.parametrize("source", ["csv", "loader"])
def test_feddadil_runs_on_your_own_domains_from_yaml(tmp_path: Path, source: str) -> None:
    if source == "csv":
        (tmp_path / "domains").mkdir()
        for name, (x, y) in domains_loader().items():
            _write(tmp_path / "domains" / f"{name}.csv", ["x1", "x2"], x, y)
        init: dict[str, Any] = {"data": "csv", "data_args": {"files": str(tmp_path / "domains"), "label_column": "y"}}
    else:
        init = {"data": "tests.test_cli_own_data:domains_loader", "data_args": {"shift": 3.0}}
    data = {
        "class_path": "fedhet.datamodules.DomainFederation",
        "init_args": {**init, "num_classes": 2, "target": "target", "val_fraction": 0.2},
    }
    metrics = _fit(tmp_path, FEDDADIL, data)
    assert int(float(metrics["round"])) == 1
    for client in ("source_a", "source_b", "target"):
        assert 0.0 <= float(metrics[f"val/acc/{client}"]) <= 1.0
    step1 = DomainFederation(**{**init, "num_classes": 2, "target": "target", "include_target": False})
    assert step1.client_ids == ["source_a", "source_b"]  # FedDaDiL's step 1: FedAvg on the labelled sources


def test_domains_are_checked_naming_the_domain(tmp_path: Path) -> None:
    domains = domains_loader()
    domains["target"] = (domains["target"][0][:, :1], domains["target"][1])
    with pytest.raises(ValueError, match=r"domain 'target' has features of shape \(1,\), domain 'source_a' \(2,\)"):
        DomainFederation(num_classes=2, data=domains).setup()
    with pytest.raises(ValueError, match=r"domain 'source_a' has labels outside \[0, 1\) \(num_classes\)"):
        DomainFederation(num_classes=1, data=domains_loader()).setup()
    (tmp_path / "d").mkdir()
    _write(tmp_path / "d" / "a.csv", ["x1", "x2"], np.zeros((4, 2)), np.array([0, 1, 0, 1]))
    _write(tmp_path / "d" / "b.csv", ["x1", "x3"], np.zeros((4, 2)), np.array([0, 1, 0, 5]))
    with pytest.raises(ValueError, match=r"^b.csv row 5 column 'y': label '5' is outside; labels must be in \[0, 2\)"):
        DomainFederation(
            num_classes=2, data="csv", data_args={"files": str(tmp_path / "d"), "label_column": "y"}
        ).setup()
    _write(tmp_path / "d" / "b.csv", ["x1", "x3"], np.zeros((4, 2)), np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=r"^b.csv: its feature columns \['x1', 'x3'\] differ from a.csv's"):
        DomainFederation(
            num_classes=2, data="csv", data_args={"files": str(tmp_path / "d"), "label_column": "y"}
        ).setup()


def test_a_block_that_names_a_missing_or_taken_column_is_refused(tmp_path: Path) -> None:
    x, y, columns = pooled_blocks(30)
    _write(tmp_path / "pooled.csv", columns, x, y)
    args = {"path": str(tmp_path / "pooled.csv"), "label_column": "y"}
    with pytest.raises(ValueError, match=r"^pooled.csv: block 'lab' names column 'weight', which the file lacks$"):
        HybridFederation("csv", ASSIGNMENT, data_args={**args, "blocks": {"lab": ["weight"]}}).setup()
    with pytest.raises(ValueError, match=r"^pooled.csv: column 'age' is in blocks 'lab' and 'scan'$"):
        HybridFederation("csv", ASSIGNMENT, data_args={**args, "blocks": {"lab": ["age"], "scan": ["age"]}}).setup()


class MissingArgumentHybrid(HybridFederation):
    """A subclass whose ``__init__`` does not take the arguments its base class reads back (``data_args`` ...)."""

    def __init__(self, assignment: dict[str, dict[str, list[Any]]], seed: int = 0) -> None:
        super().__init__(data="digits", assignment=assignment, seed=seed)


def test_a_subclass_missing_an_argument_under_the_cli_is_one_line_naming_it(tmp_path: Path) -> None:
    data = {
        "class_path": "tests.test_cli_own_data.MissingArgumentHybrid",
        "init_args": {
            "assignment": {"a": {"blocks": ["TL"], "classes": [0, 1]}, "b": {"blocks": ["BR"], "classes": [2]}}
        },
    }
    with pytest.raises(SystemExit) as exit_info:
        _fit(tmp_path, HYFEM, data, rounds=1)
    line, hint = str(exit_info.value.code).splitlines()  # sys.exit(message): printed to standard error, status 1
    assert hint == "(--debug or FEDHET_DEBUG=1 shows the traceback)"
    assert line == (
        "fedhet: error: MissingArgumentHybrid: argument 'data_args' is missing: HybridFederation.build_clients reads"
        " the hyperparameter 'data_args', but MissingArgumentHybrid.__init__ does not take it, so it was not recorded;"
        " add 'data_args' to the arguments of MissingArgumentHybrid.__init__"
    )
