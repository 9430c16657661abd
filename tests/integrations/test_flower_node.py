"""The node side of the Flower apps: the node config refused with the field named, no run folder on a node, and a
node's client built once per run and reused by its later messages with the simulation's metrics unchanged."""

import shlex

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402

from fedhet.cli import FederatedCLI  # noqa: E402
from fedhet.integrations.flower import RemoteFederation, RemoteRunner, load_run  # noqa: E402
from fedhet.integrations.flower.apps import cached_node_client, node_client  # noqa: E402
from tests.integrations.flower_helpers import read_metrics, write_config  # noqa: E402
from tests.integrations.flower_loopback import cold, recipe  # noqa: E402
from tests.integrations.test_flower_engine import LoopbackNodes  # noqa: E402

CLIENTS = ["client_000", "client_001", "client_002"]


def context(node_config, run_id=1, args=()):
    run_config = {"fedhet-args": shlex.join(args)}
    return Context(run_id=run_id, node_id=7, node_config=node_config, state=RecordDict(), run_config=run_config)


@pytest.fixture
def config(tmp_path):
    return write_config(tmp_path / "federation.yaml", "FedAvg", tmp_path / "runs", rounds=1)


@pytest.mark.parametrize(
    ("node_config", "message"),
    [
        ({}, "set field 'client-id' (or 'partition-id')"),
        ({"client-id": 3}, "field 'client-id' must be a string (e.g. --node-config 'client-id=\"client_000\"'), got 3"),
        ({"client-id": ""}, "field 'client-id' must be a string"),
        ({"client-id": "site_x"}, "field 'client-id' is 'site_x', which the federation's data do not hold"),
        ({"partition-id": -1}, "field 'partition-id' is -1, out of range: the federation's data hold 3 clients"),
        ({"partition-id": 3}, "field 'partition-id' is 3, out of range"),
        ({"partition-id": "0"}, "field 'partition-id' must be a whole number (e.g. --node-config 'partition-id=0')"),
        ({"partition-id": True}, "field 'partition-id' must be a whole number"),
        ({"partition-id": 1.0}, "field 'partition-id' must be a whole number"),
        ({"client-id": "client_000", "data-config": 2}, "field 'data-config' must be a string"),
    ],
)
def test_node_config_refused_naming_the_field(config, node_config, message):
    with pytest.raises(ValueError, match="Flower node") as error:
        node_client(config, context(node_config))
    assert message in str(error.value)


def test_partition_id_picks_the_client_at_its_position(config):
    assert node_client(config, context({"partition-id": 2})).client_id == "client_002"
    assert node_client(config, context({"partition-id": 0, "client-id": "client_001"})).client_id == "client_001"


def test_node_claims_no_run_folder(config, tmp_path):
    client = node_client(config, context({"client-id": "client_001"}))
    payload = client.context.server_state.payload_for("client_001", client.context.slot("client_001").shared)
    update, state, _ = client.fit(0, payload, {}, None)
    evaluation, _ = client.evaluate("val", 0, payload, {}, state)
    assert update.num_samples > 0
    assert evaluation is not None
    assert not (tmp_path / "runs").exists()  # no version_N folder (nor the root) for a node that logs nothing


def test_a_simulated_run_still_claims_its_folder(config, tmp_path):
    trainer, module, datamodule = load_run(config)
    trainer.setup(module, datamodule)
    assert trainer.run_dir == tmp_path / "runs" / "version_0"
    assert trainer.run_dir.is_dir()


def test_a_node_client_is_built_once_per_run(config):
    first = cached_node_client(config, context({"client-id": "client_000"}))
    assert cached_node_client(config, context({"client-id": "client_000"})) is first
    assert cached_node_client(config, context({"client-id": "client_000"}, run_id=2)) is not first
    assert cached_node_client(config, context({"client-id": "client_001"})).client_id == "client_001"


class CachedNodes(LoopbackNodes):
    """The loopback nodes of ``test_flower_engine``, each client built once (as a warm ClientApp process does)."""

    def __init__(self, config, client_ids, args=()):
        super().__init__(config, client_ids, args)
        self.overrides = list(args)

    def runner(self, cid):
        return cached_node_client(self.config, context({"client-id": cid}, run_id=11, args=self.overrides))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["FedAvg", "FedRep", "FedPAC", "FLIC"])
def test_reused_node_clients_equal_simulation(tmp_path, method):
    simulated = write_config(tmp_path / "sim.yaml", method, tmp_path / "sim", rounds=3)
    FederatedCLI(args=["fit", "-c", str(simulated)])
    config = write_config(tmp_path / "remote.yaml", method, tmp_path / "remote", rounds=3)
    trainer, module, _ = load_run(config)
    nodes = CachedNodes(config, CLIENTS)
    trainer.runner = RemoteRunner(nodes)
    trainer.fit(module, RemoteFederation(nodes.describe()))
    expected = read_metrics(tmp_path / "sim")
    assert [row["round"] for row in expected if row["round"]] == ["0.0", "1.0", "2.0"]
    assert read_metrics(tmp_path / "remote") == expected
    assert [p.name for p in (tmp_path / "remote").iterdir()] == ["version_0"]  # the server's only


def test_the_docs_loopback_recipe_is_whole():
    setup, link, nodes, run = recipe()  # what the deployment tests run, block by block
    assert "insecure = true" in setup
    assert "flower-superlink --insecure" in link
    assert "--isolation process" in nodes
    assert "fedhet.integrations.flower.node" in nodes
    assert run.startswith("flwr run examples/flower_app loopback --stream")
    assert "--isolation subprocess" in cold(nodes)
    assert "fedhet.integrations.flower.node" not in cold(nodes)
