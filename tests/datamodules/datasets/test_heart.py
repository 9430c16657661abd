import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from fedhet.datamodules import HeartFederation
from fedhet.datamodules.datasets import GL_SITES, SITES, UCI_SITES, holdout_split, load_heart, prepare_heart_features
from fedhet.datamodules.datasets.heart import UCI_COLUMNS

DATA = Path(__file__).parents[3] / "src" / "fedhet" / "datamodules" / "datasets" / "data"
FILES = {site: f"{'sa' if site == 'saheart' else site}.csv" for site in SITES}
ROWS = {"cleveland": 303, "hungarian": 294, "switzerland": 123, "va": 200, "saheart": 462, "faisalabad": 299}
WIDTHS = {"cleveland": 13, "hungarian": 13, "switzerland": 13, "va": 13, "saheart": 9, "faisalabad": 12}
DISEASE = {"cleveland": 139, "hungarian": 106, "switzerland": 115, "va": 149, "saheart": 160, "faisalabad": 96}


def file_targets(site):
    with (DATA / FILES[site]).open() as f:
        return np.array([int(row["target"]) for row in csv.DictReader(f)])


@pytest.mark.parametrize("site", SITES)
def test_site_shape_and_classes(site):
    data = load_heart(site)
    assert tuple(data.x.shape) == (ROWS[site], WIDTHS[site])
    assert data.x.dtype == torch.float32
    assert data.y.dtype == torch.int64
    assert set(data.y.tolist()) == {0, 1}
    assert int(data.y.sum()) == DISEASE[site]
    assert data.missing.shape == data.x.shape
    assert len(data.feature_names) == WIDTHS[site]


@pytest.mark.parametrize("site", SITES)
def test_label_convention_is_one_for_disease_or_event(site):
    stored = file_targets(site)
    expected = 1 - stored if site in UCI_SITES else stored
    np.testing.assert_array_equal(load_heart(site).y.numpy(), expected)


def test_cleveland_labels_match_uci_num():
    # processed.cleveland.data: row 0 has num = 0 (no disease), rows 1 and 2 num = 2 and 1 (disease)
    assert load_heart("cleveland").y[:3].tolist() == [0, 1, 1]


def test_column_names_and_encodings():
    assert load_heart("cleveland").feature_names == UCI_COLUMNS
    sa = load_heart("saheart")
    famhist = sa.x[:, sa.feature_names.index("famhist")]
    assert set(famhist.tolist()) == {0.0, 1.0}
    assert famhist[:3].tolist() == [1.0, 0.0, 1.0]  # Present, Absent, Present
    assert load_heart("faisalabad").feature_names[-1] == "time"


def test_missing_cells():
    cleveland = load_heart("cleveland")
    per_column = dict(zip(cleveland.feature_names, cleveland.missing.sum(0).tolist(), strict=True))
    assert per_column["ca"] == 4
    assert per_column["thal"] == 2
    assert sum(per_column.values()) == 6
    switzerland = load_heart("switzerland")
    assert bool(switzerland.missing[:, UCI_COLUMNS.index("chol")].all())  # cholesterol stored as 0: unrecorded
    oldpeak = UCI_COLUMNS.index("oldpeak")
    assert switzerland.x[[58, 59], oldpeak].tolist() == [-1.0, -1.0]
    assert not switzerland.missing[[58, 59], oldpeak].any()  # genuine -1.0 mm, not the missing code
    assert int(switzerland.missing[:, oldpeak].sum()) == 6
    for site in ("saheart", "faisalabad"):
        assert not load_heart(site).missing.any()


def test_loader_returns_fresh_tensors():
    first = load_heart("va")
    first.x.zero_()
    assert load_heart("va").x.abs().sum() > 0


def test_unknown_site():
    with pytest.raises(ValueError, match="unknown heart site"):
        load_heart("boston")
    with pytest.raises(ValueError, match="unknown heart sites"):
        HeartFederation(sites=["cleveland", "boston"])
    with pytest.raises(ValueError, match="each once"):
        HeartFederation(sites=["cleveland", "cleveland"])


def test_split_reproduces_global_layers_seed_0():
    # gl.md section 5.2: sizes, first rows and the reference's positives (there 1 = no disease for Cleveland)
    cleveland = load_heart("cleveland")
    train, val, test = holdout_split(303, 0.33, 0.1, seed=0)
    assert (len(train), len(val), len(test)) == (182, 21, 100)
    assert cleveland.x[train[0], :5].tolist() == [60, 1, 4, 145, 282]
    assert cleveland.x[test[0], :5].tolist() == [34, 0, 2, 118, 210]
    no_disease = [int((1 - cleveland.y[rows]).sum()) for rows in (train, val, test)]
    assert no_disease == [102, 13, 49]
    for site, positives in (("saheart", [93, 13, 54]), ("faisalabad", [62, 3, 31])):
        y = load_heart(site).y
        assert [int(y[rows].sum()) for rows in holdout_split(len(y), 0.33, 0.1, seed=0)] == positives
    train, _, test = holdout_split(303, 0.33, 0.1, seed=1)
    assert cleveland.x[train[0], :2].tolist() == [59, 1]
    assert cleveland.x[test[0], :2].tolist() == [43, 1]


def test_uci_preset_shares_columns():
    federation = HeartFederation()
    assert federation.client_ids == list(UCI_SITES)
    assert federation.num_classes == 2
    for site, spec in federation.specs.items():
        assert spec.input_shape == (13,)
        assert spec.num_train + spec.num_val + spec.num_test == ROWS[site]
    indicator = HeartFederation(missing="indicator")
    assert {spec.input_dim for spec in indicator.specs.values()} == {23}
    assert indicator.feature_names["va"][-1] == "thal_missing"


def test_gl_preset_has_own_columns():
    federation = HeartFederation(sites=GL_SITES, missing="code")
    sizes = {site: (s.input_dim, s.num_train, s.num_val, s.num_test) for site, s in federation.specs.items()}
    assert sizes == {"cleveland": (13, 182, 21, 100), "saheart": (9, 278, 31, 153), "faisalabad": (12, 180, 20, 99)}
    assert federation.feature_names["saheart"][-1] == "famhist"
    famhist = federation.client("saheart").train_dataset.x[:, -1]
    assert set(famhist.tolist()) == {0.0, 1.0}  # ordinal-encoded, not standardised


@pytest.mark.parametrize("missing", ["code", "impute", "indicator"])
def test_standardisation_is_fitted_on_the_training_split_only(missing):
    federation = HeartFederation(sites=["hungarian", "saheart"], missing=missing)
    for site, client in federation.clients.items():
        data = load_heart(site)
        rows = federation.split_rows[site]
        # a copy of the site whose validation and test rows are wildly different
        poisoned_x = data.x.clone()
        held_out = np.concatenate([rows["val"], rows["test"]])
        poisoned_x[held_out] = poisoned_x[held_out] * 100 + 1e4
        poisoned = dataclasses.replace(data, x=poisoned_x)
        clean, _ = prepare_heart_features(data, rows["train"], missing)
        dirty, _ = prepare_heart_features(poisoned, rows["train"], missing)
        torch.testing.assert_close(clean[rows["train"]], dirty[rows["train"]])
        torch.testing.assert_close(client.train_dataset.x, clean[rows["train"]])
        torch.testing.assert_close(client.test_dataset.x, clean[rows["test"]])
        torch.testing.assert_close(client.val_dataset.y, data.y[rows["val"]])


def test_code_mode_standardises_every_training_column():
    federation = HeartFederation(sites=["cleveland", "faisalabad"], missing="code")
    for client in federation.clients.values():
        x = client.train_dataset.x.double()
        torch.testing.assert_close(x.mean(0), torch.zeros(x.shape[1], dtype=torch.float64), atol=1e-5, rtol=0)
        torch.testing.assert_close(x.std(0, unbiased=False), torch.ones(x.shape[1], dtype=torch.float64))


def test_impute_mode_fills_missing_cells_with_the_training_mean():
    data = load_heart("va")
    rows = holdout_split(200, 0.33, 0.1, seed=0)[0]
    x, _ = prepare_heart_features(data, rows, "impute")
    assert torch.isfinite(x).all()
    assert (x[data.missing] == 0).all()
    raw, _ = prepare_heart_features(data, rows, "impute", standardize=False)
    chol = UCI_COLUMNS.index("chol")
    observed = rows[~data.missing[rows, chol].numpy()]
    expected = data.x[observed, chol].double().mean()
    assert raw[data.missing[:, chol], chol].unique().tolist() == pytest.approx([float(expected)], rel=1e-5)
    switzerland = load_heart("switzerland")  # no cholesterol at all: the column is 0
    x, _ = prepare_heart_features(switzerland, np.arange(80), "impute")
    assert (x[:, chol] == 0).all()


def test_federation_is_deterministic():
    first, second = HeartFederation(seed=3), HeartFederation(seed=3)
    other = HeartFederation(seed=4)
    for site in UCI_SITES:
        torch.testing.assert_close(first.client(site).train_dataset.x, second.client(site).train_dataset.x)
        torch.testing.assert_close(first.client(site).test_dataset.y, second.client(site).test_dataset.y)
    assert not np.array_equal(first.split_rows["va"]["test"], other.split_rows["va"]["test"])


def test_no_validation_split():
    federation = HeartFederation(sites=["cleveland"], val_fraction=0.0, test_fraction=0.2)
    spec = federation.specs["cleveland"]
    assert (spec.num_train, spec.num_val, spec.num_test) == (242, 0, 61)


def test_bad_arguments():
    with pytest.raises(ValueError, match="missing"):
        HeartFederation(missing="drop")
    with pytest.raises(ValueError, match="test_fraction"):
        HeartFederation(test_fraction=1.0)
