"""Two "nodes" x 1 process, started by torchrun's c10d rendezvous on loopback, give the metrics of a 1-process run."""

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fedhet.plugins.distributed import check_multi_node_launch
from tests.integrations.test_distributed import CONFIG, run_cli

pytestmark = pytest.mark.distributed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_two_nodes(config: Path, root: Path) -> list[tuple[int, str]] | None:
    """Both torchrun "machines" on a fresh rendezvous port: their exit codes and outputs, or None if they hung."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    rendezvous = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    rendezvous += ["--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "fedhet-test"]
    rendezvous += ["--local-addr", "127.0.0.1"]
    fit = ["-m", "fedhet", "fit", "-c", str(config), "--trainer.num_nodes", "2", "--trainer.devices", "1"]
    fit += ["--trainer.default_root_dir", str(root)]
    cmd = [sys.executable, "-m", "torch.distributed.run", *rendezvous, *fit]
    # one torchrun per "machine": each would run on its own host with the same command
    nodes = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
    try:
        outputs = [node.communicate(timeout=150)[0].decode() for node in nodes]
        return [(node.returncode, output) for node, output in zip(nodes, outputs, strict=True)]
    except subprocess.TimeoutExpired:
        return None
    finally:
        for node in nodes:
            node.kill()


def run_two_nodes(tmp_path: Path, model: str, rounds: int) -> list[dict]:
    config = tmp_path / f"{model}_nodes.yaml"
    config.write_text(CONFIG.format(model=model, rounds=rounds, full_last="true", dropout=0.1))
    # a rare hang of the two agents' c10d rendezvous on one loopback host (seen once in ~4 runs of this suite, cause
    # not found; a run that gets past the rendezvous takes ~15 s): one retry on a new port and a new run folder
    for attempt in range(2):
        root = tmp_path / f"nodes_{attempt}"
        results = launch_two_nodes(config, root)
        if results is not None:
            break
    assert results is not None, "both attempts of the two-node launch hung"
    for returncode, output in results:
        assert returncode == 0, output[-3000:]
    assert any("Starting with 2 processes" in output for _, output in results)
    rows = list(csv.DictReader((root / "version_0" / "metrics.csv").open()))
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def test_two_nodes_equal_one_process(tmp_path):
    one = run_cli(tmp_path, "one", "FedRep", rounds=3, devices=1)
    two = run_two_nodes(tmp_path, "FedRep", rounds=3)
    assert len(one) == 3
    assert two == one


def test_num_nodes_without_a_launcher_is_refused(monkeypatch):
    for name in ("NODE_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS", "SLURM_JOB_NAME"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="'num_nodes' is 2, but no multi-node launcher"):
        check_multi_node_launch(2)
    check_multi_node_launch(1)
    monkeypatch.setenv("NODE_RANK", "1")  # Lightning's variables set by hand on each machine
    check_multi_node_launch(2)
