"""fedhet on Flower's deployment runtime: a SuperLink and three SuperNodes as separate processes on loopback, one
`flwr run` per federation, and the server's metrics equal to `fedhet fit` simulating the same config.

Each Flower message starts a fresh ClientApp process (Python, torch and fedhet imported again), so these tests take
minutes: they are deselected from the default run (marker ``deployment``) and run as their own step of ``.ci/run``.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from tests.integrations.flower_helpers import read_metrics, write_config  # noqa: E402

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.distributed]

APP = Path(__file__).parents[2] / "examples" / "flower_app"
CLIENTS = ["client_000", "client_001", "client_002"]
ROUNDS = 2
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{process.args[0]} exited with {process.returncode}"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def stop(processes: list[subprocess.Popen]) -> None:
    for process in reversed(processes):  # each in its own session: its ClientApp children go with it
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """A SuperLink and one SuperNode per client, on 127.0.0.1; stopped when the module's tests end."""
    home = tmp_path_factory.mktemp("flwr_home")
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loopback"\n\n[superlink.loopback]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {**os.environ, "FLWR_HOME": str(home), "OMP_NUM_THREADS": "1"}
    logs = home / "logs"
    logs.mkdir()
    processes: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> subprocess.Popen:
        out = (logs / f"{name}.log").open("w")
        process = subprocess.Popen(
            [str(BIN / args[0]), *args[1:]], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        processes.append(process)
        return process

    try:
        link = start("superlink", "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(port),
                     "--disable-runtime-dependency-installation")  # fmt: skip
        wait_for_port(port, link)
        for cid in CLIENTS:
            node_port = free_port()
            node = start(cid, "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{port}",
                         "--port", str(node_port), "--node-config", f'client-id="{cid}"')  # fmt: skip
            wait_for_port(node_port, node)
        yield env, logs
    finally:
        stop(processes)


def deploy(env: dict, tmp_path: Path, config: Path, root: Path) -> float:
    """Run the Flower App with ``config`` on the loopback federation; the wall time of ``flwr run``."""
    app = tmp_path / "app"
    shutil.copytree(APP, app)
    shutil.copy(config, app / "federation.yaml")
    started = time.perf_counter()
    result = subprocess.run(
        [str(BIN / "flwr"), "run", str(app), "loopback", "--stream",
         "--run-config", f"fedhet-args='--trainer.default_root_dir {root}' wait-s=600 reply-timeout-s=900"],
        env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert list(root.glob("version_*/metrics.csv")), result.stdout[-4000:]
    return time.perf_counter() - started


def simulate(env: dict, config: Path, root: Path) -> None:
    cmd = [sys.executable, "-m", "fedhet", "fit", "-c", str(config), "--trainer.default_root_dir", str(root)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)


def round_seconds(root: Path) -> float:
    import csv

    (path,) = root.glob("version_*/metrics.csv")
    rows = [row for row in csv.DictReader(path.open()) if row["round"]]
    return sum(float(row["time/round_s"]) for row in rows) / len(rows)


@pytest.mark.parametrize("method", ["FedAvg", "FedRep", "FedPAC", "FLIC"])
def test_deployed_federation_equals_simulation(federation, tmp_path, method):
    env, logs = federation
    config = write_config(tmp_path / "federation.yaml", method, tmp_path / "unused", rounds=ROUNDS, eval_every=ROUNDS)
    deployed, simulated = tmp_path / "deployed", tmp_path / "simulated"
    wall = deploy(env, tmp_path, config, deployed)
    simulate(env, config, simulated)
    expected = read_metrics(simulated)
    assert [row["round"] for row in expected if row["round"]] == [f"{r}.0" for r in range(ROUNDS)]
    assert read_metrics(deployed) == expected
    print(
        f"\n{method}: {ROUNDS} rounds, flwr run {wall:.1f} s; mean time/round_s deployed"
        f" {round_seconds(deployed):.2f} s, simulated {round_seconds(simulated):.3f} s"
    )
