"""A process of a 2-process run that dies is named, with its rank, by the survivor (issue 16, item 7)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

SCRIPT = """
import os, signal, sys
from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedRep
from fedhet.plugins import FederatedTrainer
from fedhet.plugins import Processes, Reporting
from tests.conftest import make_client


class DieInRoundOne(FederatedCallback):
    def on_round_start(self, trainer, round_idx):
        if round_idx == 1 and trainer.global_rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)


federation = FederatedDataModule([make_client(c, 24, i) for i, c in enumerate("abcd")])
processes = Processes(accelerator="cpu", devices=2, start_method=sys.argv[2])
trainer = FederatedTrainer(rounds=3, processes=processes, reporting=Reporting(progress_bar=False),
                           default_root_dir=sys.argv[1], callbacks=[DieInRoundOne()])
trainer.fit(FedRep(hidden_dims=[8]), federation)
"""


@pytest.mark.parametrize("start_method", ["fork", "popen"])
def test_a_killed_child_is_named_with_its_rank(tmp_path, start_method):
    script = tmp_path / "dies.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), start_method],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "rank 0: lost the other processes of the run: rank 1 (pid" in done.stderr
    assert "was killed by SIGKILL" in done.stderr
