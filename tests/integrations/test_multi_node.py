"""Two "nodes" x 1 process, started by torchrun's c10d rendezvous on loopback, give the metrics of a 1-process run."""

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fedhet.plugins.processes.distributed import check_multi_node_launch
from tests.integrations.test_distributed import CONFIG, run_cli

pytestmark = pytest.mark.distributed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_two_nodes(config: Path, root: Path) -> tuple[list[tuple[int, str]] | None, list[str]]:
    """Both torchrun "machines" on a fresh rendezvous port: their exit codes and outputs (None if they hung), and
    what each had printed (kept in files, so a hang still says where each agent was)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    rendezvous = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    rendezvous += ["--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "fedhet-test"]
    rendezvous += ["--local-addr", "127.0.0.1"]
    fit = [
        "-m",
        "fedhet",
        "fit",
        "-c",
        str(config),
        "--trainer.processes.num_nodes",
        "2",
        "--trainer.processes.devices",
        "1",
    ]
    fit += ["--trainer.default_root_dir", str(root)]
    root.mkdir(parents=True, exist_ok=True)
    logs = [root / f"node{rank}.log" for rank in range(2)]
    # one torchrun per "machine": each would run on its own host with the same command; on one host both would take
    # themselves for the store's host, so the first is told it is and the second that it is not
    nodes = []
    for rank, log in enumerate(logs):
        host = ["--rdzv-conf", f"is_host={int(rank == 0)}"]
        cmd = [sys.executable, "-m", "torch.distributed.run", *rendezvous, *host, *fit]
        with log.open("wb") as out:
            nodes.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
    try:
        for node in nodes:
            node.wait(timeout=150)
        results = [(node.returncode, log.read_text()) for node, log in zip(nodes, logs, strict=True)]
    except subprocess.TimeoutExpired:
        results = None
    finally:
        for node in nodes:
            node.kill()
    return results, [log.read_text()[-2000:] for log in logs]


def run_two_nodes(tmp_path: Path, model: str, rounds: int) -> list[dict]:
    config = tmp_path / f"{model}_nodes.yaml"
    config.write_text(CONFIG.format(model=model, rounds=rounds, full_last="true", dropout=0.1))
    # a rare hang of the two-node launch on one loopback host (seen once in ~4 runs of this suite before the store's
    # host was named explicitly; a run that gets past the rendezvous takes ~15 s): one retry on a new port and a new
    # run folder, and what each agent printed if both hang
    hung: list[str] = []
    for attempt in range(2):
        root = tmp_path / f"nodes_{attempt}"
        results, printed = launch_two_nodes(config, root)
        if results is not None:
            break
        hung += [f"attempt {attempt}, node {rank}:\n{text}" for rank, text in enumerate(printed)]
    assert results is not None, "both attempts of the two-node launch hung:\n" + "\n".join(hung)
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
