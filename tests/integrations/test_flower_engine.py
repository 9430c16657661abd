"""The engine split for Flower (server round + one runner per client) gives the in-process simulation's metrics.

The clients' requests and replies go through the Flower record encoding (tensors in ArrayRecords, scalars in
Metric/ConfigRecords, each client's state in its own RecordDict) but not through a network: the deployed runs are in
tests/integrations/test_flower_deployment.py.
"""

from pathlib import Path

import pytest

pytest.importorskip("flwr")

from flwr.app import RecordDict  # noqa: E402

from fedhet.cli import FederatedCLI  # noqa: E402
from fedhet.integrations.flower import NodeClient, RemoteFederation, RemoteRunner, load_run  # noqa: E402
from fedhet.integrations.flower.apps import CLIENT_ARGS  # noqa: E402
from fedhet.integrations.flower.records import (  # noqa: E402
    decode_evaluation,
    decode_request,
    decode_spec,
    decode_update,
    encode_evaluation,
    encode_request,
    encode_spec,
    encode_update,
    load_client_state,
    save_client_state,
)
from tests.integrations.flower_helpers import read_metrics, write_config  # noqa: E402


class LoopbackNodes:
    """Each client on its own runner, rebuilt from the config for every request (as a Flower node does)."""

    def __init__(self, config, client_ids, args=()):
        self.config = config
        self.args = [*args, *CLIENT_ARGS]
        self.states = {cid: RecordDict() for cid in client_ids}  # each node's Context.state

    def runner(self, cid):
        return NodeClient(*load_run(self.config, self.args), client_id=cid)

    def describe(self):
        return {cid: decode_spec(encode_spec(self.runner(cid).spec)) for cid in self.states}

    def __call__(self, kind, round_idx, requests):
        replies = {}
        for cid, (payload, statistics) in requests.items():
            request = encode_request(round_idx, payload, statistics, kind)
            round_seen, payload, statistics, stage = decode_request(request)
            assert round_seen == round_idx
            state = load_client_state(self.states[cid])
            if kind == "train":
                update, new_state, seconds = self.runner(cid).fit(round_idx, payload, statistics, state)
                replies[cid] = decode_update(encode_update(update, seconds))
            else:
                result, new_state = self.runner(cid).evaluate(stage, round_idx, payload, statistics, state)
                replies[cid] = decode_evaluation(encode_evaluation(result))
            save_client_state(self.states[cid], new_state)
        return replies


@pytest.mark.kernels
@pytest.mark.slow
@pytest.mark.parametrize("method", ["FedRep", "FedPAC", "FLIC"])
def test_split_engine_equals_simulation(tmp_path, method):
    simulated = write_config(tmp_path / "sim.yaml", method, tmp_path / "sim", rounds=3)
    FederatedCLI(args=["fit", "-c", str(simulated)])
    config = write_config(tmp_path / "remote.yaml", method, tmp_path / "remote", rounds=3)
    trainer, module, _ = load_run(config)
    nodes = LoopbackNodes(config, ["client_000", "client_001", "client_002"])
    trainer.runner = RemoteRunner(nodes)
    trainer.fit(module, RemoteFederation(nodes.describe()))
    expected = read_metrics(tmp_path / "sim")
    assert [row["round"] for row in expected if row["round"]] == ["0.0", "1.0", "2.0"]
    assert read_metrics(tmp_path / "remote") == expected


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "overrides"),
    [
        ("hyfem/digits_quadrants.yaml", ["--trainer.local_steps", "4"]),
        ("feddadil/blobs_toy.yaml", []),
        ("gl/heart.yaml", ["--epochs", "null", "--trainer.reporting.eval_every", "5"]),  # 2 rounds, not 10 epochs
    ],
)
def test_shipped_method_split_equals_simulation(tmp_path, config, overrides):
    # the server holds no data: evaluations of the server's own model on pooled data (HyFEM's global accuracy) are
    # only in the simulation, and are left out of the comparison
    shipped = str(Path(__file__).parents[2] / "configs" / config)
    args = ["--trainer.rounds", "2", "--trainer.reporting.progress_bar", "false", *overrides]
    FederatedCLI(args=["fit", "-c", shipped, *args, "--trainer.default_root_dir", str(tmp_path / "sim")])
    trainer, module, datamodule = load_run(shipped, [*args, "--trainer.default_root_dir", str(tmp_path / "remote")])
    datamodule.setup("fit")
    nodes = LoopbackNodes(Path(shipped), datamodule.client_ids, args)
    trainer.runner = RemoteRunner(nodes)
    trainer.fit(module, RemoteFederation(nodes.describe()))

    def local(rows):
        return [{k: v for k, v in row.items() if "global_" not in k} for row in rows]

    expected = local(read_metrics(tmp_path / "sim"))
    assert [row["round"] for row in expected if row["round"]] == ["0.0", "1.0"]
    assert local(read_metrics(tmp_path / "remote")) == expected
