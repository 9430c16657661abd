"""ModelMatching: the server model, per-block and matched averages, the anchors it sends, checkpoints, evaluation."""

import io
from types import SimpleNamespace

import pytest
import torch

from fedhet.callbacks import ModelMatching
from fedhet.callbacks.hyfem import CLASSIFIER, STAT_PREFIX, anchor_key
from fedhet.core import ClientUpdate, ServerState
from fedhet.datamodules import HybridFederation
from fedhet.functional import matched_average, project_classifier, weighted_mean
from fedhet.functional.matching import Classifier
from fedhet.modules import HybridBody, HyFEM

TABLE = {
    "a": {"blocks": ["v0", "v1"], "classes": [0, 1]},
    "b": {"blocks": ["v1", "v2"], "classes": [1, 2, 3]},
    "c": {"blocks": ["v0"], "classes": [2, 3]},
}
SMALL = {"num_classes": 4, "num_views": 3, "samples_per_class": 20, "latent_dim": 12, "view_latent_dim": 6}


@pytest.fixture
def stub():
    federation = HybridFederation("synthetic", TABLE, data_args=SMALL, seed=0)
    return SimpleNamespace(
        datamodule=federation, seed=3, server_state=ServerState(), log_dict=lambda metrics, step: None
    )


def upload(stub, client_id, seed):
    """A client's upload: a randomly perturbed client model as its ``hyfem/`` statistics."""
    module = HyFEM(extractor_dims=[5], hidden_dim=4)
    module.setup_client(stub.datamodule.specs[client_id])
    module.configure_model()
    g = torch.Generator().manual_seed(seed)
    stats = {STAT_PREFIX + n: torch.randn(p.shape, generator=g) for n, p in module.named_parameters()}
    return ClientUpdate(client_id, num_samples=10 * (seed + 1), shared={}, statistics=stats)


def local(update):
    return {n[len(STAT_PREFIX) :]: v for n, v in update.statistics.items()}


def test_first_anchors_are_the_identity_projection_of_the_server(stub):
    callback = ModelMatching(body=HybridBody, extractor_dims=[5], hidden_dim=4, server_hidden_dim=6)
    callback.on_federation_start(stub, None)
    server = callback.server.state_dict()
    assert list(callback.server["body"].extractors) == ["v0", "v1", "v2"]
    assert server["body.hidden.weight"].shape == (6, 15)
    payload = stub.server_state.per_client["b"]
    assert torch.equal(payload[anchor_key("body.extractors.v2.1.weight")], server["body.extractors.v2.1.weight"])
    assert anchor_key("body.extractors.v0.1.weight") not in payload  # b does not hold v0
    assert torch.equal(payload[anchor_key("body.hidden.weight")], server["body.hidden.weight"][:4, 5:])
    assert torch.equal(payload[anchor_key("head.weight")], server["head.weight"][:, :4])


def test_extractors_are_averaged_per_block_and_classifiers_by_matching(stub):
    callback = ModelMatching(body=HybridBody, extractor_dims=[5], hidden_dim=4, matching=False)
    callback.on_federation_start(stub, None)
    before = {n: v.clone() for n, v in callback.server.state_dict().items()}
    updates = [upload(stub, "a", 0), upload(stub, "c", 1)]  # nobody uploads v2
    callback.on_aggregate_end(stub, 0, stub.server_state, updates)
    after = callback.server.state_dict()
    extractors = weighted_mean([{n: v for n, v in local(u).items() if "extractors" in n} for u in updates], [10, 20])
    assert torch.allclose(after["body.extractors.v0.1.weight"], extractors["body.extractors.v0.1.weight"])
    assert torch.equal(after["body.extractors.v1.1.weight"], local(updates[0])["body.extractors.v1.1.weight"])
    assert torch.equal(after["body.extractors.v2.1.weight"], before["body.extractors.v2.1.weight"])
    body = callback.server["body"]
    clients = [Classifier(*(local(u)[n] for n in CLASSIFIER)) for u in updates]
    cols = [body.feature_columns(["v0", "v1"]), body.feature_columns(["v0"])]
    previous = Classifier(*(before[n] for n in CLASSIFIER))
    identity = [torch.arange(4)] * 2
    expected, _ = matched_average(clients, cols, identity, [1 / 3, 2 / 3], previous)
    assert all(torch.allclose(after[n], e, atol=1e-6) for n, e in zip(CLASSIFIER, expected, strict=True))
    projected = project_classifier(expected, cols[1], identity[1])
    anchors = stub.server_state.per_client["c"]
    assert all(torch.allclose(anchors[anchor_key(n)], p) for n, p in zip(CLASSIFIER, projected, strict=True))


def test_state_round_trips_through_a_weights_only_checkpoint(stub):
    callback = ModelMatching(body=HybridBody, extractor_dims=[5], hidden_dim=4)
    callback.on_federation_start(stub, None)
    callback.on_aggregate_end(stub, 0, stub.server_state, [upload(stub, c, k) for k, c in enumerate(TABLE)])
    buffer = io.BytesIO()
    torch.save(callback.state_dict(), buffer)
    buffer.seek(0)
    restored = ModelMatching(body=HybridBody, extractor_dims=[5], hidden_dim=4)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    restored.on_federation_start(stub, None)
    assert all(torch.equal(restored.perms[c], callback.perms[c]) for c in TABLE)
    mine, theirs = callback.server.state_dict(), restored.server.state_dict()
    assert all(torch.equal(mine[n], theirs[n]) for n in mine)


def test_global_evaluation_uses_the_full_feature_samples(stub, tiny_federation):
    callback = ModelMatching(body=HybridBody, extractor_dims=[5], hidden_dim=4)
    metrics = {}
    callback.on_evaluation_end(stub, "test", 0, metrics)
    x, y = stub.datamodule.global_dataloader("test").dataset.x, stub.datamodule.global_dataloader("test").dataset.y
    assert x.shape[1] == 3 * 16
    with torch.no_grad():
        logits = callback.server["head"](callback.server["body"](x))
    assert metrics["test/global_acc"] == pytest.approx(float((logits.argmax(1) == y).float().mean()))
    assert metrics["test/global_loss"] == pytest.approx(float(torch.nn.functional.cross_entropy(logits, y)), rel=1e-5)
    plain = {}
    ModelMatching(body=HybridBody).on_evaluation_end(SimpleNamespace(datamodule=tiny_federation), "val", 0, plain)
    assert plain == {}  # a federation without full-feature samples gets no global metrics
