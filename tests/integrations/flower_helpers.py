"""Shared pieces of the Flower tests: federations small enough for a few rounds, and reading a run's metrics."""

import csv
from pathlib import Path

FEDERATIONS = {
    "FedAvg": "fedhet.modules.FedAvg\n  init_args: {hidden_dims: [16], dropout: 0.1, lr: 0.1}",
    "FedRep": "fedhet.modules.FedRep\n  init_args: {hidden_dims: [16], dropout: 0.1, lr: 0.1}",
    "FedPAC": "fedhet.modules.FedPAC\n  init_args: {hidden_dims: [16], lr: 0.1, lambda_align: 1.0}",
    "FLIC": "fedhet.modules.FLIC\n  init_args: {variant: hl, pretrain_epochs: 2, lambda_align: 1.0e-3,"
    " lambda_anchor: 1.0e-3}",
}

CONFIG = """
trainer:
  rounds: {rounds}
  seed: 3
  processes:
    accelerator: cpu
  reporting:
    progress_bar: false
    eval_every: {eval_every}
  sampler:
    class_path: fedhet.plugins.UniformSampler
    init_args: {{fraction: 0.7, full_last_round: true}}
  default_root_dir: {root}
model:
  class_path: {model}
data:
  class_path: fedhet.datamodules.DigitsFederation
  init_args: {{num_clients: 3, alpha: 0.5, val_fraction: 0.2, test_fraction: 0.2, seed: 1}}
"""


def write_config(path: Path, method: str, root: Path, rounds: int = 3, eval_every: int = 1) -> Path:
    path.write_text(CONFIG.format(model=FEDERATIONS[method], rounds=rounds, eval_every=eval_every, root=root))
    return path


def read_metrics(root: Path) -> list[dict[str, str]]:
    """The logged rows of a run, without the wall times (``time/*`` and diagnostics such as ``fedpac/qp_seconds``)."""
    (path,) = root.glob("version_*/metrics.csv")  # the server's run (client nodes' trainers log nothing)
    rows = list(csv.DictReader(path.open()))
    return [{k: v for k, v in row.items() if not (k.startswith("time/") or k.endswith("seconds"))} for row in rows]
