"""fedhet on Flower's deployment runtime: the loopback recipe of ``docs/deployment.md`` (a SuperLink, three SuperNodes
and their warm ClientApp processes on 127.0.0.1) run as written, one ``flwr run`` per federation, and the server's
metrics equal to ``fedhet fit`` simulating the same config, bit for bit; the shipped ``examples/flower_app`` run as
shipped (its rounds aside), and a failing ServerApp's one-line error in ``flwr run --stream``.

They take a minute or more (processes start, Flower polls every few seconds): deselected from the default run (marker
``deployment``), run as their own step of ``.ci/run``.
"""

import shutil
import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from tests.integrations.flower_helpers import read_metrics, write_config  # noqa: E402
from tests.integrations.flower_loopback import APP, Loopback  # noqa: E402

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.distributed]

ROUNDS = 2


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """The doc's loopback federation, started once for the module's tests."""
    with Loopback(tmp_path_factory.mktemp("flwr_home")) as loopback:
        yield loopback


def deploy(loopback: Loopback, tmp_path, config, root) -> float:
    """Run the Flower App with ``config`` on the loopback federation; the wall time of ``flwr run``."""
    app = tmp_path / "app"
    shutil.copytree(APP, app)
    shutil.copy(config, app / "federation.yaml")
    run_config = f"fedhet-args='--trainer.default_root_dir {root}' wait-s=600 reply-timeout-s=900"
    wall, result = loopback.run(app, run_config)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert list(root.glob("version_*/metrics.csv")), result.stdout[-4000:]
    return wall


def simulate(config, root, *args: str) -> None:
    cmd = [sys.executable, "-m", "fedhet", "fit", "-c", str(config), "--trainer.default_root_dir", str(root), *args]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)


def test_the_shipped_example_runs_as_shipped(federation, tmp_path):
    """``examples/flower_app`` unchanged but its rounds: every round a line in ``flwr run --stream``, the metrics
    those ``fedhet fit`` gives its config (at 9390786 its ``trainer.accelerator`` ended the run with no line)."""
    wall, result = federation.run(APP, f"fedhet-args='--trainer.rounds {ROUNDS}'")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    for r in range(1, ROUNDS + 1):
        assert f"round {r}/{ROUNDS} " in result.stdout, result.stdout[-4000:]
    deployed = read_metrics(federation.server_dir / "fedhet_runs" / "flower_fedpac_digits")  # its default_root_dir
    simulate(APP / "federation.yaml", tmp_path / "simulated", "--trainer.rounds", str(ROUNDS))
    assert deployed == read_metrics(tmp_path / "simulated")
    print(f"\nexamples/flower_app: {ROUNDS} rounds, flwr run {wall:.1f} s")


def test_a_failing_server_app_says_why_in_the_stream(federation, tmp_path):
    app = tmp_path / "app"
    shutil.copytree(APP, app)
    (app / "federation.yaml").write_text("trainer:\n  accelerator: cpu\nmodel:\n  class_path: fedhet.modules.FedAvg\n")
    _, result = federation.run(app, "wait-s=5")
    said = [line for line in result.stdout.splitlines() if "fedhet ServerApp failed" in line]
    assert said, result.stdout[-4000:] + result.stderr[-4000:]
    assert "ValueError: config " in said[0]
    assert "accelerator" in said[0]


@pytest.mark.parametrize("method", ["FedAvg", "FedRep", "FedPAC", "FLIC"])
def test_deployed_federation_equals_simulation(federation, tmp_path, method):
    config = write_config(tmp_path / "federation.yaml", method, tmp_path / "unused", rounds=ROUNDS, eval_every=ROUNDS)
    deployed, simulated = tmp_path / "deployed", tmp_path / "simulated"
    wall = deploy(federation, tmp_path, config, deployed)
    simulate(config, simulated)
    expected = read_metrics(simulated)
    assert [row["round"] for row in expected if row["round"]] == [f"{r}.0" for r in range(ROUNDS)]
    assert read_metrics(deployed) == expected
    assert federation.log("nodes").count("train message of round") >= ROUNDS  # answered by the warm processes
    print(f"\n{method}: {ROUNDS} rounds, flwr run {wall:.1f} s")
