"""A suite's summary run on Weights & Biases: its table and figures, in the suite's group, beside the suite's runs.

When the final runs of a suite logged to W&B (a ``WandbLogger`` in their resolved ``trainer.logger``, alone or in a
list), ``fedhet compare`` logs one more run once the results are written: named ``<suite>-summary``, with job type
``summary``, in the W&B group of the suite's runs (the suite's name) and the project, entity, folder and offline mode
of the first such run's logger. It holds ``table``, a ``wandb.Table`` with the columns and rows of ``table.csv``, one
``figures/<name>`` image per figure, and the provenance (suite file, commit, environment, inputs' sha256) as its
config. W&B is an optional dependency (``pip install "fedhet[wandb]"``): without it, or when no run used W&B,
nothing is logged.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SUMMARY_JOB = "summary"


def wandb_logger(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``init_args`` of the first ``WandbLogger`` in a resolved config's ``trainer.logger``, or ``None``.

    Args:
        config: a run's resolved ``config.yaml``, as a mapping.

    Example:
        >>> wandb_logger({"trainer": {"logger": [{"class_path": "lightning.pytorch.loggers.WandbLogger"}]}})
        {}

    """
    trainer = config.get("trainer")
    logger = trainer.get("logger") if isinstance(trainer, Mapping) else None
    for entry in logger if isinstance(logger, list) else [logger]:
        name = entry.get("class_path") if isinstance(entry, Mapping) else entry
        if isinstance(name, str) and name.rsplit(".", 1)[-1] == "WandbLogger":
            init_args = entry.get("init_args") if isinstance(entry, Mapping) else None
            return dict(init_args) if isinstance(init_args, Mapping) else {}
    return None


def read_table(path: Path) -> tuple[list[str], list[list[Any]]]:
    """A ``table.csv``'s columns and rows: its ``# key: value`` lines skipped, numbers as floats, ``nan``: ``None``."""

    def cell(text: str) -> Any:
        try:
            value = float(text)
        except ValueError:
            return text or None
        return None if math.isnan(value) else value

    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    reader = csv.reader(lines)
    columns = next(reader)
    return columns, [[cell(text) for text in row] for row in reader]


def log_summary(
    suite_name: str,
    configs: Iterable[Mapping[str, Any]],
    table_csv: Path,
    figures: Sequence[Path],
    provenance: Mapping[str, str],
) -> str | None:
    """Log the suite's summary run (see the module docstring) when a run used W&B.

    Args:
        suite_name: the suite's name: the W&B group of its runs, and the summary run's name before ``-summary``.
        configs: the final runs' resolved configs.
        table_csv: the suite's ``table.csv``.
        figures: the suite's PNG figures.
        provenance: the suite file, the runs' commit, environment and inputs' sha256, logged as the run's config.

    Returns:
        the summary run's local files folder (``.../wandb/<run>/files``), or ``None`` when nothing was logged.

    """
    logger = next((found for found in map(wandb_logger, configs) if found is not None), None)
    if logger is None or importlib.util.find_spec("wandb") is None:
        return None
    import wandb

    columns, rows = read_table(table_csv)
    settings: dict[str, Any] = {"project": logger.get("project") or "lightning_logs"}  # WandbLogger's default
    if logger.get("entity"):
        settings["entity"] = logger["entity"]
    if logger.get("save_dir") or logger.get("dir"):
        settings["dir"] = str(logger.get("save_dir") or logger.get("dir"))
    if logger.get("offline"):
        settings["mode"] = "offline"
    run = wandb.init(
        **settings,
        group=suite_name,
        name=f"{suite_name}-summary",
        job_type=SUMMARY_JOB,
        config=dict(provenance),
    )
    try:
        run.log(
            {
                "table": wandb.Table(columns=list[str | int](columns), data=rows),
                **{f"figures/{path.stem}": wandb.Image(str(path)) for path in figures},
            }
        )
        return str(run.dir)
    finally:
        run.finish()
