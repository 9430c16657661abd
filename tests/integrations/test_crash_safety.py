"""A run killed with SIGKILL, during training or while writing its checkpoint, resumes to the uninterrupted result."""

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fedhet.plugins.storage.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

CONFIG = """
trainer:
  rounds: 6
  seed: 2
  processes:
    accelerator: cpu
  reporting:
    progress_bar: false
model:
  class_path: fedhet.modules.FedRep
  init_args: {hidden_dims: [16], head_epochs: 1, dropout: 0.1, lr: 0.1}
data:
  class_path: fedhet.datamodules.DigitsFederation
  init_args: {num_clients: 4, val_fraction: 0.2, test_fraction: 0.2, seed: 0}
"""

# Runs the CLI, but the n-th checkpoint write kills the process half-way through writing its temporary file.
KILL_WHILE_SAVING = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    import fedhet.plugins.storage.checkpoint as checkpoint
    from fedhet.cli import main

    calls = {"n": 0}
    real_save = torch.save

    def dying_save(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == int(os.environ["KILL_AT_SAVE"]):
            f.write(b"half a checkpoint")
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return real_save(obj, f, *args, **kwargs)

    checkpoint.torch.save = dying_save
    main(sys.argv[1:])
    """
)


def fit_args(config: Path, root: Path, *extra: str) -> list[str]:
    return ["fit", "-c", str(config), "--trainer.default_root_dir", str(root), *extra]


def metrics(root: Path) -> list[dict]:
    rows = csv.DictReader((root / "version_0" / "metrics.csv").open())
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "fedrep.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def uninterrupted(tmp_path, config) -> list[dict]:
    subprocess.run([sys.executable, "-m", "fedhet", *fit_args(config, tmp_path / "straight")], check=True, timeout=300)
    return metrics(tmp_path / "straight")


def test_sigkill_during_training_loses_at_most_the_current_round(tmp_path, config, uninterrupted):
    root = tmp_path / "killed"
    ckpt = root / "version_0" / "checkpoints" / "last.ckpt"
    proc = subprocess.Popen([sys.executable, "-m", "fedhet", *fit_args(config, root, "--trainer.rounds", "1000")])
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if ckpt.is_file() and load_checkpoint(ckpt).round >= 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("no checkpoint of round 2 within the time limit")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    done = load_checkpoint(ckpt).round
    assert done >= 2
    subprocess.run([sys.executable, "-m", "fedhet", *fit_args(config, root, "--ckpt_path", "last")], check=True)
    assert metrics(root) == uninterrupted


def test_sigkill_while_writing_a_checkpoint_keeps_the_previous_one(tmp_path, config, uninterrupted):
    root = tmp_path / "killed"
    env = {**os.environ, "KILL_AT_SAVE": "4"}  # the 4th write (after round 4) dies half-way
    proc = subprocess.run([sys.executable, "-c", KILL_WHILE_SAVING, *fit_args(config, root)], env=env, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    state = load_checkpoint(root / "version_0" / "checkpoints" / "last.ckpt")  # intact, from the write before
    assert state.round == 3
    subprocess.run([sys.executable, "-m", "fedhet", *fit_args(config, root, "--ckpt_path", "last")], check=True)
    assert metrics(root) == uninterrupted
    # the next write removed the dead write's temporary file
    assert not list((root / "version_0" / "checkpoints").glob("*.tmp"))
