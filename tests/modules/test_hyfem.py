"""HyFEM's module: layers per block, the client step, uploads, plain Trainer, the FedProx reduction, end to end."""

import lightning
import pytest
import torch
from torch import nn

from fedhet.callbacks import FederatedCallback, ModelMatching
from fedhet.callbacks.hyfem import STAT_PREFIX, anchor_key
from fedhet.core.seeding import derive_seed, seeded
from fedhet.datamodules import HybridFederation
from fedhet.functional import project_classifier
from fedhet.functional.matching import Classifier
from fedhet.modules import FedProx, HybridBody, HybridLocal, HyFEM
from fedhet.plugins import FederatedTrainer
from tests.trainer_options import trainer_options

TABLE = {
    "a": {"blocks": ["v0", "v1"], "classes": [0, 1]},
    "b": {"blocks": ["v1", "v2"], "classes": [1, 2, 3]},
    "c": {"blocks": ["v0", "v2"], "classes": [2, 3]},
}
SMALL = {"num_classes": 4, "num_views": 3, "samples_per_class": 40, "latent_dim": 12, "view_latent_dim": 6}


@pytest.fixture
def hybrid():
    return HybridFederation("synthetic", TABLE, data_args=SMALL, batch_size=16, seed=0)


def trainer(tmp_path, rounds=2, **kwargs):
    settings = {"accelerator": "cpu", "enable_progress_bar": False, "logger": False, "checkpoint_every": 0}
    settings |= {"local_steps": 4}
    return FederatedTrainer(**trainer_options(rounds=rounds, default_root_dir=str(tmp_path), **{**settings, **kwargs}))


def built(spec, **kwargs):
    module = HyFEM(extractor_dims=[5], hidden_dim=6, **kwargs)
    module.setup_client(spec)
    module.configure_model()
    return module


def test_layers_follow_the_clients_blocks(hybrid):
    module = built(hybrid.specs["b"])
    assert list(module.body.extractors) == ["v1", "v2"]
    assert module.body.hidden.weight.shape == (6, 10)
    assert module.head.weight.shape == (4, 6)
    assert module.shared_state_dict() == {}
    assert {anchor_key(n) for n, _ in module.named_parameters()} <= set(module.personal_state_dict())
    with pytest.raises(ValueError, match="mu1"):
        HyFEM(mu1=-1.0)
    with pytest.raises(ValueError, match="server_hidden_dim"):
        HyFEM(hidden_dim=8, server_hidden_dim=4)


def test_client_hidden_layer_is_the_matched_server_layer_on_zero_padded_features():
    server = HybridBody({"x": 3, "y": 2, "z": 4}, [5], hidden_dim=7)
    client = HybridBody({"z": 4, "x": 3}, [5], hidden_dim=4)
    cols, perm = server.feature_columns(["z", "x"]), torch.tensor([6, 0, 3, 2])
    head = Classifier(server.hidden.weight, server.hidden.bias, torch.zeros(1, 7), torch.zeros(1))
    w1, b1, _, _ = project_classifier(head, cols, perm)
    client.load_state_dict({"hidden.weight": w1, "hidden.bias": b1}, strict=False)
    for name in ("x", "z"):
        client.extractors[name].load_state_dict(server.extractors[name].state_dict())
    x = torch.randn(8, 7)
    v_client = client.features(x)
    v_server = torch.zeros(8, server.hidden.in_features)
    v_server[:, cols] = v_client
    expected = torch.relu(server.hidden(v_server))[:, perm]
    assert torch.allclose(client(x), expected, atol=1e-6)


def test_the_client_starts_at_its_anchors_and_the_proximal_gradients_are_the_gaps(hybrid):
    module = built(hybrid.specs["a"], mu1=0.3, mu2=0.7)
    anchors = {anchor_key(n): torch.randn_like(p) for n, p in module.named_parameters()}
    module.load_state_dict(anchors, strict=False)
    module.on_train_start()
    assert all(
        float(r.detach()) == 0 for r in module.proximal_terms()
    )  # r_{m,1} = r_{m,2} = 0 after ClientUpdate's init
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p))
    x, y = next(iter(hybrid.client("a").train_dataloader()))
    ce = nn.functional.cross_entropy(module(x), y)
    grads = torch.autograd.grad(ce, list(module.parameters()))
    module.training_step((x, y), 0).backward()
    for (name, p), g in zip(module.named_parameters(), grads, strict=True):
        mu = 0.3 if name.startswith("body.extractors.") else 0.7
        assert torch.allclose(p.grad, g + mu * (p.detach() - module.anchor(name)), atol=1e-5), name


def test_uploads_are_exactly_the_declared_statistics_and_bytes_are_counted(tmp_path, hybrid):
    class Spy(FederatedCallback):
        updates = {}

        def on_aggregate_start(self, round_idx, updates):
            self.updates[round_idx] = updates

    spy = Spy()
    run = trainer(tmp_path, callbacks=[spy])
    run.fit(HyFEM(extractor_dims=[5], hidden_dim=6), hybrid)
    for round_idx, updates in spy.updates.items():
        assert [u.client_id for u in updates] == ["a", "b", "c"]
        for update in updates:
            module = built(hybrid.specs[update.client_id])
            assert update.shared == {}
            assert set(update.statistics) == {STAT_PREFIX + n for n, _ in module.named_parameters()}
        params = sum(p.numel() * 4 for u in updates for p in built(hybrid.specs[u.client_id]).parameters())
        assert run.history[round_idx]["comm/bytes_up"] == sum(u.num_bytes for u in updates) == params
        assert run.history[round_idx]["comm/bytes_down"] == params  # each client's anchors: its own model's size
    assert {"val/global_acc", "val/acc_mean"} <= set(run.history[-1])


def test_works_under_a_plain_lightning_trainer(hybrid):
    client = hybrid.client("b")
    module = HyFEM(extractor_dims=[5], hidden_dim=6, lr=0.1)
    trainer = lightning.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(module, client)
    assert any(isinstance(cb, ModelMatching) for cb in trainer.callbacks)  # harmless outside the engine
    before = {n: module.anchor(n) for n, _ in module.named_parameters()}
    assert any(not torch.equal(p, before[n]) for n, p in module.named_parameters())
    (result,) = trainer.test(module, client)
    assert 0.0 <= result["test/acc"] <= 1.0


def test_with_one_block_and_no_matching_hyfem_follows_fedprox(tmp_path, tiny_federation):
    class Record(FederatedCallback):
        def __init__(self, read):
            self.read, self.trajectory = read, []

        def on_round_end(self, trainer):
            self.trajectory.append({n: v.clone() for n, v in self.read(trainer).items()})

    hyfem = HyFEM(extractor_dims=[8], hidden_dim=8, mu1=0.3, mu2=0.3, matching=False, lr=0.1)
    matching = hyfem.configure_callbacks()[0]

    def server_of_hyfem(trainer):
        return {k: v for k, v in matching.server.state_dict().items()}

    hyfem.configure_callbacks = lambda: [matching]
    record_h = Record(server_of_hyfem)
    trainer(tmp_path / "h", rounds=3, callbacks=[record_h], seed=4).fit(hyfem, tiny_federation)

    with seeded(derive_seed(4, "hyfem", "server")):  # the initial server model HyFEM drew
        body, head = HybridBody({"input": 6}, [8], 8), nn.Linear(8, 3)
    rename = {"body.extractors.input.1.": "body.1.", "body.hidden.": "body.3.", "head.": "head."}

    def as_fedprox(state):
        return {next(v + n[len(k) :] for k, v in rename.items() if n.startswith(k)): t for n, t in state.items()}

    fedprox = FedProx(mu=0.3, hidden_dims=[8, 8], lr=0.1)
    fedprox.setup_client(tiny_federation.specs["a"])
    fedprox.configure_model()
    fedprox.load_state_dict(as_fedprox(nn.ModuleDict({"body": body, "head": head}).state_dict()))
    record_p = Record(lambda t: t.server_state.shared)
    trainer(tmp_path / "p", rounds=3, callbacks=[record_p], seed=4).fit(fedprox, tiny_federation)
    assert len(record_h.trajectory) == len(record_p.trajectory) == 3
    for h, p in zip(record_h.trajectory, record_p.trajectory, strict=True):
        h = as_fedprox(h)
        assert set(h) == set(p)
        assert all(torch.allclose(h[n], p[n], atol=1e-5) for n in p)
    assert not torch.allclose(record_p.trajectory[0]["head.weight"], record_p.trajectory[-1]["head.weight"])


@pytest.mark.kernels
def test_runs_are_deterministic_and_resume_exactly(tmp_path, hybrid):
    def run(root, rounds, ckpt=None, every=0):
        module = HyFEM(extractor_dims=[5], hidden_dim=6, lr=0.1)
        fed = HybridFederation("synthetic", TABLE, data_args=SMALL, batch_size=16, seed=0)
        t = trainer(root, rounds=rounds, checkpoint_every=every)
        t.fit(module, fed, ckpt_path=ckpt)
        (matching,) = [cb for cb in t.callbacks if isinstance(cb, ModelMatching)]
        return t, matching

    full, m_full = run(tmp_path / "full", 4)
    again, m_again = run(tmp_path / "again", 4)
    run(tmp_path / "resumed", 2, every=1)
    resumed, m_resumed = run(tmp_path / "resumed", 4, ckpt="last", every=1)
    for other, m_other in ((again, m_again), (resumed, m_resumed)):
        assert other.history[-1]["val/global_acc"] == full.history[-1]["val/global_acc"]
        assert other.history[-1]["val/acc_mean"] == full.history[-1]["val/acc_mean"]
        assert all(torch.equal(m_full.perms[c], m_other.perms[c]) for c in TABLE)
        state, other_state = m_full.state_dict()["server"], m_other.state_dict()["server"]
        assert all(torch.equal(state[n], other_state[n]) for n in state)


def test_hyfem_beats_stand_alone_on_a_small_hybrid_federation(tmp_path, hybrid):
    hyfem = trainer(tmp_path / "h", rounds=20, eval_every=20, local_steps=8)
    hyfem.fit(HyFEM(extractor_dims=[16], hidden_dim=16, lr=0.1, mu1=0.5, mu2=0.5), hybrid)
    local = trainer(tmp_path / "l", rounds=20, eval_every=20, local_steps=8)
    local.fit(HybridLocal(extractor_dims=[16], hidden_dim=16, lr=0.1), hybrid)
    assert hyfem.history[-1]["val/acc_mean"] > local.history[-1]["val/acc_mean"] + 0.05
    assert hyfem.history[-1]["val/global_acc"] > local.history[-1]["val/acc_mean"]
    assert local.history[-1]["val/acc_mean"] < 0.75  # a stand-alone client never sees some classes
    assert HybridLocal().configure_callbacks() == []
