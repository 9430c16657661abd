"""Your own CSV files from YAML: the five methods of configs/csv run from the CLI on the bundled example; a bad cell
is a one-line usage error naming the file, row and column; the data-only configs swap a method's federation."""

import csv
import sys
from pathlib import Path

import pytest
import yaml

from fedhet.cli import FederatedCLI, main
from fedhet.datamodules import CSVFederation
from fedhet.datamodules.aligned import AlignedFederation

CONFIGS = Path(__file__).parents[1] / "configs"
METHODS = {  # config -> overrides that keep the run to a few seconds
    "global_layers": ["--model.init_args.width", "16", "--epochs", "null"],  # its config counts epochs; 2 rounds here
    "flic": ["--model.init_args.pretrain_epochs", "1"],
    "hetlocal": [],
    "local": [],
    "fedavg_union": [],
}
HINT = "(fedhet fit --help lists the options; --debug or FEDHET_DEBUG=1 shows the whole error)"


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fedhet"])


def last_metrics(root):
    (path,) = Path(root).glob("version_*/metrics.csv")
    rows = list(csv.DictReader(path.open()))
    return {key: value for key, value in rows[-1].items() if value != ""}


@pytest.mark.parametrize("method", METHODS)
def test_each_method_runs_from_its_csv_config(method, tmp_path):
    config = CONFIGS / "csv" / f"heart_sites_{method}.yaml"
    root = tmp_path / method
    args = ["fit", "-c", str(config), "--trainer.rounds", "2", "--trainer.default_root_dir", str(root)]
    main([*args, "--trainer.reporting.progress_bar", "false", *METHODS[method]])
    metrics = last_metrics(root)
    assert int(float(metrics["round"])) == 1
    for site in ("cleveland", "hungarian", "switzerland", "va"):
        assert 0.0 <= float(metrics[f"val/acc/{site}"]) <= 1.0


def write_config(tmp_path, data):
    config = {
        "model": {"class_path": "fedhet.modules.FedAvg", "init_args": {"hidden_dims": [8]}},
        "data": data,
        "trainer": {"rounds": 1, "default_root_dir": str(tmp_path / "run"), "reporting": {"progress_bar": False}},
    }
    path = tmp_path / "csv.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["fit", "-c", str(path)]


@pytest.mark.parametrize("layout", ["own columns", "union"])
def test_a_bad_cell_is_a_one_line_usage_error(layout, tmp_path, capsys):
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "site_a.csv").write_text("age,sbp,label\n50,120,0\n61,130,1\n")
    (sites / "site_b.csv").write_text("age,label\n" + "".join(f"{40 + k},{k % 2}\n" for k in range(15)) + "n/a,1\n")
    data = {"class_path": "fedhet.datamodules.CSVFederation", "init_args": {"files": str(sites)}}
    if layout == "union":
        data = {"class_path": "fedhet.datamodules.aligned.AlignedFederation", "init_args": {"federation": data}}
    with pytest.raises(SystemExit) as exit_info:
        main(write_config(tmp_path, data))
    assert exit_info.value.code == 2
    sentence = (
        "fedhet fit: error: site_b.csv row 17 column 'age': 'n/a' is a missing value (set missing: mean to impute"
        " missing values from the client's training rows)"
    )
    assert capsys.readouterr().err.splitlines() == [sentence, HINT]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["heart_sites", "heart_sites_union"])
def test_a_data_config_swaps_the_federation_of_a_method_s_config(name):
    data_config = CONFIGS / "data" / f"{name}.yaml"
    method = CONFIGS / "fedavg" / "heart_uci.yaml"  # another federation (HeartFederation)
    cli = FederatedCLI(args=["-c", str(method), "-c", str(data_config)], run=False)
    expected = AlignedFederation if name.endswith("union") else CSVFederation
    assert type(cli.datamodule) is expected
    section = yaml.safe_load(data_config.read_text())["data"]
    users = [path for path in (CONFIGS / "csv").glob("*.yaml") if yaml.safe_load(path.read_text())["data"] == section]
    assert users, f"no config of configs/csv uses the federation of {data_config.name}"


def test_your_own_files_run_from_a_data_config_given_after_the_method_s(tmp_path):
    sites = tmp_path / "hospitals"
    sites.mkdir()
    outcome = ["ill", "well"]
    with (sites / "north.csv").open("w", newline="") as f:
        csv.writer(f).writerows([["age", "bp", "outcome"], *([40 + k, 110 + k, outcome[k % 2]] for k in range(30))])
    with (sites / "south.csv").open("w", newline="") as f:
        smoker = ["yes", "no", "no"]
        csv.writer(f).writerows(
            [["age", "smoker", "outcome"], *([40 + k, smoker[k % 3], outcome[k % 2]] for k in range(30))]
        )
    mine = yaml.safe_load((CONFIGS / "data" / "heart_sites.yaml").read_text())
    mine["data"]["init_args"].update(files=str(sites), label_column="outcome", drop_columns=[])
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(mine))
    root = tmp_path / "run"
    args = ["fit", "-c", str(CONFIGS / "csv" / "heart_sites_flic.yaml"), "-c", str(tmp_path / "mine.yaml")]
    main([*args, "--trainer.rounds", "1", "--trainer.default_root_dir", str(root), *METHODS["flic"]])
    metrics = last_metrics(root)
    assert {"val/acc/north", "val/acc/south"} <= set(metrics)
