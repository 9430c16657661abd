"""CSV inputs bounded and named: unreadable files, long cells, labels that are classes (never sizes), wide files."""

from __future__ import annotations

import csv
import logging
import re
from pathlib import Path

import pytest

from fedhet.datamodules import CSVClientDataModule, CSVFederation
from fedhet.datamodules.csv_table import read_site_table


def write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _sites(tmp_path: Path, bad: bytes) -> None:
    """A good site ``a.csv`` beside ``b.csv`` holding ``bad``: the error must say which file."""
    write(tmp_path / "a.csv", ["age", "y"], [[40 + k, k % 2] for k in range(6)])
    (tmp_path / "b.csv").write_bytes(bad)


UNREADABLE = {
    "latin-1": (b"age,y\n50,0\n" + "61,caf\u00e9\n".encode("latin-1"), "b.csv row 3: byte 17 is not UTF-8 text"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00", "b.csv row 1: byte 0 is not UTF-8 text"),
    "nul": (b"age,y\n50,0\n6\x001,1\n", "b.csv row 3 column 'age': '6\\x001' is not a number"),
    "long-cell": (
        b"age,y\n50,0\n" + b"6" * 131_073 + b",1\n",
        "b.csv row 3: a cell is longer than 131,072 characters",
    ),
}


@pytest.mark.parametrize("case", UNREADABLE)
def test_an_unreadable_file_is_one_line_naming_the_file_and_row(tmp_path: Path, case: str) -> None:
    content, sentence = UNREADABLE[case]
    _sites(tmp_path, content)
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}") as error:
        CSVFederation(str(tmp_path), label_column="y")
    assert len(str(error.value).splitlines()) == 1
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}"):
        CSVClientDataModule(str(tmp_path / "b.csv"), label_column="y")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("label", ["100000", "1000000000", "1e300"])
def test_a_large_integer_label_is_a_class_never_a_size(tmp_path: Path, label: str) -> None:
    write(tmp_path / "a.csv", ["v", "y"], [[k, k % 2] for k in range(20)])
    write(tmp_path / "b.csv", ["v", "y"], [[k, k % 2] for k in range(19)] + [[19, label]])
    data = CSVFederation(str(tmp_path), label_column="y", val_fraction=0, test_fraction=0)
    assert data.num_classes == 3
    assert data.classes[:2] == ("0", "1")
    assert int(data.classes[2]) == int(float(label))
    assert data.client("b").spec.classes == (0, 1, 2)


def test_integer_labels_are_the_classes_present_in_numeric_order(tmp_path: Path) -> None:
    write(tmp_path / "a.csv", ["v", "y"], [[k, [10, 2, -1][k % 3]] for k in range(12)])
    data = CSVFederation(str(tmp_path), label_column="y", val_fraction=0, test_fraction=0)
    assert data.classes == ("-1", "2", "10")
    assert data.client("a").train_dataset.y.tolist() == [[2, 1, 0][k % 3] for k in range(12)]


def test_a_label_outside_the_declared_classes_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.csv", ["v", "y"], [[k, k % 2] for k in range(6)] + [[6, 1000000000]])
    sentence = "a.csv row 8 column 'y': label '1000000000' is not one of classes [0, 1]"
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        CSVFederation(str(tmp_path), label_column="y", classes=[0, 1])


@pytest.mark.parametrize(
    ("label", "num_classes", "sentence"),
    [
        ("1000000000", None, "label '1000000000' is outside; the 3 labels present are not 0..2: give num_classes"),
        ("1e300", None, "label '1e300' is outside; the 3 labels present are not 0..2: give num_classes"),
        ("2", 2, "label '2' is outside; labels must be in [0, 2) (num_classes)"),
        ("-1", 2, "label '-1' is outside; labels must be in [0, 2) (num_classes)"),
    ],
)
def test_a_client_s_label_outside_its_classes_is_refused_naming_the_row(
    tmp_path: Path, label: str, num_classes: int | None, sentence: str
) -> None:
    path = write(tmp_path / "site.csv", ["v", "y"], [[k, k % 2] for k in range(6)] + [[6, label]])
    with pytest.raises(ValueError, match=f"^site.csv row 8 column 'y': {re.escape(sentence)}$"):
        CSVClientDataModule(str(path), label_column="y", num_classes=num_classes)


@pytest.mark.timeout(60)
def test_a_file_of_100000_columns_is_read_in_linear_time(tmp_path: Path) -> None:
    """Column lookups scanned the header (10k / 20k / 40k columns: 1.6 / 5.9 / 23.7 s; 10^5: no answer in 120 s)."""
    width = 100_000
    header = [f"c{j}" for j in range(width)]
    write(tmp_path / "wide.csv", header, [list(range(width)) for _ in range(3)])
    table = read_site_table(tmp_path / "wide.csv")
    assert table.column("c99999") == ["99999"] * 3
    header[-1] = "c0"
    write(tmp_path / "twice.csv", header, [])
    with pytest.raises(ValueError, match=r"^twice.csv row 1: column name 'c0' appears more than once$"):
        read_site_table(tmp_path / "twice.csv")


def test_the_summary_lists_each_site_s_classes_and_a_lone_rare_class_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Ten rows labelled 2 at one site of a 0/1 task silently made a 3-class federation."""
    write(tmp_path / "a.csv", ["v", "y"], [[k, k % 2] for k in range(1000)] + [[k, 2] for k in range(10)])
    write(tmp_path / "b.csv", ["v", "y"], [[k, k % 2] for k in range(300)])
    with caplog.at_level(logging.WARNING):
        data = CSVFederation(str(tmp_path), label_column="y")
    assert data.class_counts == {"a": {"0": 500, "1": 500, "2": 10}, "b": {"0": 150, "1": 150}}
    assert capsys.readouterr().err.splitlines() == [
        "fedhet: CSVFederation: a: 1,010 rows, classes {'0': 500, '1': 500, '2': 10}",
        "fedhet: CSVFederation: b: 300 rows, classes {'0': 150, '1': 150}",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "CSVFederation: class '2' appears only at a, in 10 of 1010 rows (1.0 %): a mistyped label? Give `classes` to"
        " refuse labels outside them"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        CSVFederation(str(tmp_path), label_column="y", classes=[0, 1, 2])  # declared: no warning
    assert caplog.records == []
    write(tmp_path / "b.csv", ["v", "y"], [[k, k % 3] for k in range(300)])  # class 2 at both sites: no warning
    with caplog.at_level(logging.WARNING):
        CSVFederation(str(tmp_path), label_column="y")
    assert caplog.records == []
