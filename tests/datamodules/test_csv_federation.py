"""A federation of CSV files: parsing, encoding against scikit-learn, splits, column names, one-line errors."""

import csv
import re

import numpy as np
import pytest
import torch
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from fedhet.datamodules import CSVClientDataModule, CSVFederation, FederatedDataModule
from fedhet.datamodules.aligned import AlignedFederation

SITES = ("cleveland", "hungarian", "switzerland", "va")


def write(path, header, rows):
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def two_sites(tmp_path, n=40, seed=0):
    """Site ``a``: age, sex (text), bp; site ``b``: bp, smoker (text), an id column; label ``y`` in 0/1."""
    rng = np.random.default_rng(seed)
    a = [
        [round(float(rng.normal(50, 10)), 1), rng.choice(["female", "male"]), int(rng.integers(90, 180)), k % 2]
        for k in range(n)
    ]
    b = [
        [int(rng.integers(90, 180)), rng.choice(["never", "former", "current"]), f"p{k}", k % 2] for k in range(n // 2)
    ]
    write(tmp_path / "a.csv", ["age", "sex", "bp", "y"], a)
    write(tmp_path / "b.csv", ["bp", "smoker", "id", "y"], b)
    return a, b


def federation(tmp_path, **kwargs):
    options = {"label_column": "y", "drop_columns": ["id"], "categorical": "one_hot", **kwargs}
    return CSVFederation(str(tmp_path), **options)


# ---------------------------------------------------------------------------------------------------- encoding
def test_numeric_columns_are_standardised_on_the_client_s_training_rows_as_sklearn_does(tmp_path):
    a, _ = two_sites(tmp_path)
    data = federation(tmp_path)
    rows = data.split_rows["a"]
    raw = np.array([[row[0], row[2]] for row in a], dtype=np.float64)
    scaler = StandardScaler().fit(raw[rows["train"]])
    names = data.feature_names["a"]
    numeric = [names.index("age"), names.index("bp")]
    client = data.client("a")
    for split in ("train", "val", "test"):
        x = getattr(client, f"{split}_dataset").x
        expected = scaler.transform(raw[rows[split]])
        np.testing.assert_allclose(x[:, numeric].numpy(), expected, rtol=1e-5, atol=1e-5)
    assert x.dtype == torch.float32


def test_text_columns_are_one_hot_encoded_on_training_values_as_sklearn_does(tmp_path):
    _, b = two_sites(tmp_path)
    data = federation(tmp_path)
    rows = data.split_rows["b"]
    smoker = np.array([[row[1]] for row in b])
    encoder = OneHotEncoder(handle_unknown="ignore", sparse_output=False).fit(smoker[rows["train"]])
    values = list(encoder.categories_[0])
    assert data.feature_names["b"] == ("bp", *(f"smoker={value}" for value in values))  # file order; id dropped
    client = data.client("b")
    for split in ("train", "val", "test"):
        x = getattr(client, f"{split}_dataset").x
        np.testing.assert_array_equal(x[:, 1:].numpy(), encoder.transform(smoker[rows[split]]))


def test_a_value_seen_only_outside_training_rows_is_all_zeros(tmp_path):
    write(tmp_path / "s.csv", ["v", "kind", "y"], [[k, "x" if k else "rare", k % 2] for k in range(20)])
    for seed in range(20):  # a seed that holds the rare row (row 0) out of training
        data = CSVFederation(str(tmp_path), label_column="y", categorical="one_hot", stratify=False, seed=seed)
        if 0 not in data.split_rows["s"]["train"]:
            break
    assert data.feature_names["s"] == ("v", "kind=x")
    client = data.client("s")
    held_out = torch.cat([client.val_dataset.x, client.test_dataset.x])
    assert held_out[:, 1].tolist().count(0.0) == 1
    assert client.train_dataset.x[:, 1].eq(1).all()


def test_categorical_columns_one_hot_encode_numeric_codes(tmp_path):
    write(tmp_path / "s.csv", ["cp", "y"], [[1 + k % 3, k % 2] for k in range(12)])
    data = CSVFederation(str(tmp_path), label_column="y", categorical_columns=["cp"], val_fraction=0, test_fraction=0)
    assert data.feature_names["s"] == ("cp=1", "cp=2", "cp=3")
    x = data.client("s").train_dataset.x
    assert torch.equal(x.sum(dim=1), torch.ones(12))


def test_missing_cells_take_the_training_mean_and_the_scale_of_recorded_training_cells(tmp_path):
    values = [1.0, "", 4.0, "n/a", 10.0, 7.0, "", 2.0, 5.0, 8.0]
    write(tmp_path / "s.csv", ["v", "kind", "y"], [[v, "" if k == 3 else "p", k % 2] for k, v in enumerate(values)])
    data = CSVFederation(
        str(tmp_path), label_column="y", categorical="one_hot", missing="mean", val_fraction=0, test_fraction=0.3
    )
    rows = data.split_rows["s"]
    column = np.array([np.nan if v in ("", "n/a") else v for v in values], dtype=np.float64)
    mean, std = np.nanmean(column[rows["train"]]), np.nanstd(column[rows["train"]])
    expected = (np.where(np.isnan(column), mean, column) - mean) / std
    client = data.client("s")
    for split, dataset in (("train", client.train_dataset), ("test", client.test_dataset)):
        np.testing.assert_allclose(dataset.x[:, 0].numpy(), expected[rows[split]], rtol=1e-5, atol=1e-6)
    kind = torch.cat([client.train_dataset.x[:, 1], client.test_dataset.x[:, 1]])
    order = np.concatenate([rows["train"], rows["test"]])
    assert kind[order.tolist().index(3)] == 0  # a missing text cell: no category
    assert data.feature_names["s"] == ("v", "kind=p")


def test_unstandardised_columns_keep_their_units(tmp_path):
    a, _ = two_sites(tmp_path)
    data = federation(tmp_path, standardize=False)
    train = data.split_rows["a"]["train"]
    x = data.client("a").train_dataset.x
    np.testing.assert_allclose(x[:, 0].numpy(), np.array([a[i][0] for i in train]), rtol=1e-6)


# ---------------------------------------------------------------------------------------------------- labels and splits
def test_text_labels_are_numbered_in_sorted_order_or_as_classes_says(tmp_path):
    write(tmp_path / "s.csv", ["v", "outcome"], [[k, ["yes", "no", "maybe"][k % 3]] for k in range(30)])
    sorted_ = CSVFederation(str(tmp_path), label_column="outcome")
    assert sorted_.classes == ("maybe", "no", "yes")
    assert sorted_.num_classes == 3
    given = CSVFederation(str(tmp_path), label_column="outcome", classes=["no", "maybe", "yes"])
    rows = given.split_rows["s"]["train"]
    expected = [{"no": 0, "maybe": 1, "yes": 2}[["yes", "no", "maybe"][k % 3]] for k in rows]
    assert given.client("s").train_dataset.y.tolist() == expected
    with pytest.raises(ValueError, match=r"field 'classes' must name each label once, got \['no', 'no', 'yes'\]"):
        CSVFederation(str(tmp_path), label_column="outcome", classes=["no", "no", "yes"])


def test_integer_classes_name_labels_written_as_numbers(tmp_path):
    write(tmp_path / "s.csv", ["v", "y"], [[k, [1.0, 0.0][k % 2]] for k in range(10)])  # '1.0' is the label 1
    data = CSVFederation(str(tmp_path), label_column="y", classes=[1, 0], val_fraction=0, test_fraction=0)
    assert data.classes == ("1", "0")
    assert data.client("s").train_dataset.y.tolist() == [k % 2 for k in range(10)]


def test_integer_labels_are_class_indices_shared_by_every_site(tmp_path):
    write(tmp_path / "a.csv", ["v", "y"], [[k, k % 2] for k in range(10)])
    write(tmp_path / "b.csv", ["w", "y"], [[k, 2.0] for k in range(10)])  # '2.0' is the integer 2
    data = CSVFederation(str(tmp_path), label_column="y", val_fraction=0, test_fraction=0)
    assert data.classes == ("0", "1", "2")
    assert data.specs["b"].classes == (2,)
    assert data.specs["a"].num_classes == data.specs["b"].num_classes == 3


def test_splits_are_seeded_stratified_and_disjoint(tmp_path):
    write(tmp_path / "s.csv", ["v", "y"], [[k, int(k < 30)] for k in range(100)])  # 30 % positives
    first = CSVFederation(str(tmp_path), label_column="y", val_fraction=0.1, test_fraction=0.2, seed=3)
    again = CSVFederation(str(tmp_path), label_column="y", val_fraction=0.1, test_fraction=0.2, seed=3)
    other = CSVFederation(str(tmp_path), label_column="y", val_fraction=0.1, test_fraction=0.2, seed=4)
    rows = first.split_rows["s"]
    assert {k: v.tolist() for k, v in rows.items()} == {k: v.tolist() for k, v in again.split_rows["s"].items()}
    assert rows["test"].tolist() != other.split_rows["s"]["test"].tolist()
    assert sorted(np.concatenate(list(rows.values())).tolist()) == list(range(100))
    assert [int((rows[s] < 30).sum()) for s in ("train", "val", "test")] == [21, 3, 6]
    assert [len(rows[s]) for s in ("train", "val", "test")] == [70, 10, 20]


def test_the_bundled_example_federation(tmp_path):
    data = CSVFederation("fedhet:heart_sites", label_column="disease", drop_columns=["record"], categorical="one_hot")
    assert data.client_ids == list(SITES)
    assert [spec.num_train + spec.num_val + spec.num_test for spec in data.specs.values()] == [297, 261, 105, 136]
    assert "chol" in data.feature_names["hungarian"]
    assert "chol" not in data.feature_names["switzerland"]
    assert data.feature_names["va"][1:3] == ("sex=female", "sex=male")
    assert data.describe()[0]["num_val"] > 0


# ---------------------------------------------------------------------------------------------------- union of columns
def test_the_union_layout_merges_columns_by_name(tmp_path):
    two_sites(tmp_path)
    inner = federation(tmp_path)
    union = AlignedFederation(inner, layout="union")
    names = union.feature_names["a"]
    assert names[:5] == ("age", "sex=female", "sex=male", "bp", "smoker=current")
    assert union.specs["a"].input_dim == union.specs["b"].input_dim == len(names)
    x_b = union.client("b").train_dataset.x
    own_b = inner.client("b").train_dataset.x
    assert torch.equal(x_b[:, names.index("bp")], own_b[:, 0])
    assert not x_b[:, names.index("age")].any()


def test_a_federation_of_csv_clients_passes_their_column_names_to_the_union(tmp_path):
    write(tmp_path / "a.csv", ["age", "sbp", "label"], [[k, 2 * k, k % 2] for k in range(8)])
    write(tmp_path / "b.csv", ["sbp", "chol", "label"], [[k, 3 * k, k % 2] for k in range(6)])
    clients = [CSVClientDataModule(str(tmp_path / name), num_classes=2) for name in ("a.csv", "b.csv")]
    union = AlignedFederation(FederatedDataModule(clients), layout="union")
    assert union.feature_names["b"] == ("age", "sbp", "chol")
    assert union.client("b").train_dataset.x[:, 1].tolist() == [float(k) for k in range(6)]


# ---------------------------------------------------------------------------------------------------- errors
ERRORS = {
    "text-in-a-numeric-column": (
        [["age", "y"], [50, 0], [61, 1], ["abc", 0]],
        {},
        "b.csv row 4 column 'age': 'abc' is not a number (name the column in categorical_columns to one-hot encode it)",
    ),
    "a-text-column-refused": (
        [["sex", "y"], ["male", 0], ["female", 1]],
        {"categorical": "refuse"},
        "b.csv row 2 column 'sex': 'male' is not a number (set categorical: one_hot to encode text columns, or name"
        " it in drop_columns)",
    ),
    "a-missing-value-refused": (
        [["age", "y"], [50, 0], ["n/a", 1]],
        {},
        "b.csv row 3 column 'age': 'n/a' is a missing value (set missing: mean to impute missing values from the"
        " client's training rows)",
    ),
    "a-missing-label": (
        [["age", "y"], [50, 0], [61, ""]],
        {"missing": "mean"},
        "b.csv row 3 column 'y': the label is missing; every row needs one",
    ),
    "a-label-outside-classes": (
        [["age", "y"], [50, "0"], [61, "maybe"]],
        {"classes": ["0", "1"]},
        "b.csv row 3 column 'y': label 'maybe' is not one of classes ['0', '1']",
    ),
    "no-label-column": (
        [["age", "label"], [50, 0]],
        {},
        "b.csv: no label column 'y' (field 'label_column'); its columns are ['age', 'label']",
    ),
    "a-short-row": (
        [["age", "y"], [50, 0], [61]],
        {},
        "b.csv row 3: the header names 2 columns but this row has 1",
    ),
    "a-repeated-column": (
        [["age", "age", "y"], [50, 51, 0]],
        {},
        "b.csv row 1: column name 'age' appears more than once",
    ),
    "an-unknown-drop-column": (
        [["age", "y"], [50, 0]],
        {"drop_columns": ["patient"]},
        "CSVFederation: field 'drop_columns' names ['patient'], which no file has",
    ),
}


@pytest.mark.parametrize("mistake", ERRORS)
def test_a_bad_file_is_one_line_naming_the_file_row_and_column(mistake, tmp_path):
    rows, options, sentence = ERRORS[mistake]
    write(tmp_path / "a.csv", ["age", "y"], [[40 + k, k % 2] for k in range(6)])
    write(tmp_path / "b.csv", rows[0], rows[1:])
    with pytest.raises(ValueError, match=f"^{re.escape(sentence)}$"):
        CSVFederation(str(tmp_path), label_column="y", **options)


def test_missing_files_and_empty_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="'nowhere.csv' is neither a CSV file nor a folder"):
        CSVFederation(["nowhere.csv"])
    with pytest.raises(FileNotFoundError, match="holds no .csv file"):
        CSVFederation(str(tmp_path))
    with pytest.raises(ValueError, match="field 'missing' must be 'refuse' or 'mean'"):
        CSVFederation(str(tmp_path), missing="drop")  # type: ignore[arg-type]
