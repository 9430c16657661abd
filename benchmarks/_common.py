"""What the benchmark scripts share: a trainer that only trains, leaving evaluation to ``trainer.test``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedhet.plugins import FederatedTrainer


def quiet_trainer(
    rounds: int, seed: int = 0, root: str | Path = "fedhet_runs/benchmarks", **overrides: Any
) -> FederatedTrainer:
    """A CPU ``FederatedTrainer`` with no logger, progress display, checkpoints or per-client logging.

    Clients are evaluated only after the last round (the engine always evaluates then), so a benchmark's time goes to
    training. ``overrides`` replace any of these settings.
    """
    settings: dict[str, Any] = {
        "rounds": rounds,
        "seed": seed,
        "accelerator": "cpu",
        "logger": False,
        "enable_progress_bar": False,
        "checkpoint_every": 0,
        "eval_every": rounds + 1,
        "log_per_client": False,
        "default_root_dir": str(root),
    }
    return FederatedTrainer(**{**settings, **overrides})
