"""The suite's W&B summary run (offline): its table is table.csv's, its figures the suite's, in the suite's group."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("wandb")
from fedhet.cli import main  # noqa: E402
from fedhet.experiments.compare import run_spec, summarise_on_wandb, write_results  # noqa: E402
from fedhet.experiments.suite import load_suite  # noqa: E402
from fedhet.experiments.wandb_summary import wandb_logger  # noqa: E402
from tests.experiments.test_compare import _suite, _table  # noqa: E402
from tests.integrations import test_wandb  # noqa: E402

offline_wandb = test_wandb.offline_wandb  # the fixture: W&B offline, writing only under tmp_path, no network

WANDB = {"class_path": "lightning.pytorch.loggers.WandbLogger", "init_args": {"project": "fedhet-suite"}}


def _finished_suite(tmp_path: Path, logger: Any) -> tuple[Any, list[dict[str, Any]]]:
    """The smoke suite with a result and a resolved config (trainer.logger = ``logger``) for each of its runs."""
    tmp_path.mkdir(exist_ok=True)
    suite = load_suite(_suite(tmp_path))
    results = []
    for method in suite.methods:
        for seed in suite.seeds:
            folder = run_spec(suite, "digits", method, seed, {}).folder / "version_0"
            folder.mkdir(parents=True)
            (folder / "config.yaml").write_text(yaml.safe_dump({"trainer": {"logger": logger, "seed": seed}}))
            acc = 0.5 + 0.1 * seed + (0.05 if method == "fedrep" else 0.0)
            results.append(
                {
                    "federation": "digits",
                    "method": method,
                    "seed": seed,
                    "fit_version": "version_0",
                    "config_sha256": f"{seed:064x}",
                    "cpu_s": 2.0,
                    "rounds": 2,
                    "bytes_per_round": 10.0,
                    "val": [{"round": 0, "val/acc_mean": acc - 0.1}, {"round": 1, "val/acc_mean": acc}],
                    "test": {"test/acc_mean": acc, "test/acc_worst": acc - 0.2, "test/acc/c0": acc},
                }
            )
    return suite, results


def test_summary_run_holds_the_table_and_figures(offline_wandb: Path, tmp_path: Path) -> None:
    logger = [True, {**WANDB, "init_args": {**WANDB["init_args"], "save_dir": str(offline_wandb)}}]
    suite, results = _finished_suite(tmp_path, logger)
    written = write_results(suite, results, {})
    files = summarise_on_wandb(suite, results, written)
    assert files is not None
    records = test_wandb.finished_run_records(offline_wandb)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.run_group, run.job_type, run.display_name) == (
        "fedhet-suite",
        "smoke",
        "summary",
        "smoke-summary",
    )
    logged_config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert f"`{logged_config['inputs_sha256']}`" in (suite.output / "table.md").read_text()

    (table_json,) = Path(files).glob("media/table/table_*.table.json")
    logged = json.loads(table_json.read_text())
    lines = [line for line in (suite.output / "table.csv").read_text().splitlines() if not line.startswith("#")]
    header, *rows = list(csv.reader(lines))
    assert logged["columns"] == header
    assert len(logged["data"]) == len(rows) == 2
    for got, row in zip(logged["data"], rows, strict=True):
        for value, text in zip(got, row, strict=True):
            if text in ("", "nan"):
                assert value is None
            elif isinstance(value, float):
                assert value == pytest.approx(float(text))
            else:
                assert value == text
    images = sorted(p.name.split("_")[0] for p in Path(files).glob("media/images/figures/*.png"))
    assert images == ["clients", "val"]


def test_no_summary_without_wandb_runs_or_without_wandb(
    offline_wandb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite, results = _finished_suite(tmp_path / "csv", True)  # the default CSV logger only
    assert summarise_on_wandb(suite, results, write_results(suite, results, {})) is None
    suite, results = _finished_suite(tmp_path / "w", WANDB)
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if W&B were not installed
    assert summarise_on_wandb(suite, results, write_results(suite, results, {})) is None
    assert not (offline_wandb / "wandb").exists()


@pytest.mark.parametrize(
    ("logger", "found"),
    [
        ("WandbLogger", {}),
        ({"class_path": "lightning.pytorch.loggers.CSVLogger"}, None),
        ([{"class_path": "CSVLogger"}, WANDB], {"project": "fedhet-suite"}),
        (True, None),
        (None, None),
    ],
)
def test_wandb_logger_found_in_a_resolved_config(logger: Any, found: dict[str, Any] | None) -> None:
    assert wandb_logger({"trainer": {"logger": logger}}) == found


def _offline_runs(save_dir: Path) -> list[Any]:
    """The run record and history of every finished offline run under ``save_dir`` (one per run folder)."""
    runs = []
    for folder in sorted(Path(save_dir, "wandb").glob("offline-run-*")):
        records = test_wandb.finished_records(folder)  # the summary run, this process's, may still be flushing
        (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        runs.append((run, test_wandb.history(records)))
    return runs


@pytest.mark.slow
@pytest.mark.distributed
def test_suite_logging_to_wandb_end_to_end(offline_wandb: Path, tmp_path: Path) -> None:
    """A real suite whose runs log to W&B: every fit in the suite's group beside its CSV record, then the summary."""
    logger = {**WANDB, "init_args": {**WANDB["init_args"], "save_dir": str(offline_wandb)}}
    path = _suite(tmp_path, tuning=None, seeds=[0])
    spec = yaml.safe_load(path.read_text())
    del spec["methods"]["fedrep"]["search"]
    for method in spec["methods"].values():
        method["overrides"]["trainer.logger"] = logger
    path.write_text(yaml.safe_dump(spec))
    main(["compare", "-c", str(path)])

    out = tmp_path / "out"
    runs = _offline_runs(offline_wandb)
    assert {run.run_group for run, _ in runs} == {"smoke"}
    (summary,) = [run for run, _ in runs if run.job_type == "summary"]
    assert summary.display_name == "smoke-summary"
    logged = [rows for run, rows in runs if run.job_type != "summary"]
    fits = [rows for rows in logged if any("val/acc_mean" in r for r in rows)]
    tests = [rows for rows in logged if any("test/acc_mean" in r for r in rows)]
    assert len(fits) == len(tests) == len(logged) / 2 == 2  # a fit and a test per (method, seed)
    table = _table(out)
    for method in ("fedavg", "fedrep"):
        folder = out / "runs" / "digits" / method / "seed0"
        val = [float(r["val/acc_mean"]) for r in _csv_rows(folder) if r.get("val/acc_mean")]
        assert sum(rows[-1].get("val/acc_mean") == pytest.approx(val[-1]) for rows in fits) == 1
        acc = float(table[("digits", method)]["test/acc_mean"])  # the table, from the runs' own CSV records
        assert sum(any(r.get("test/acc_mean") == pytest.approx(acc) for r in rows) for rows in tests) == 1


def _csv_rows(run: Path) -> list[dict[str, str]]:
    """Every row of every version's metrics.csv under a run folder (the fit's and the test's)."""
    rows = []
    for path in sorted(run.glob("version_*/metrics.csv")):
        with path.open(newline="") as handle:
            rows += list(csv.DictReader(handle))
    return rows
