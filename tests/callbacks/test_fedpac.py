"""CentroidSync and HeadMixing: server steps on hand-made uploads, delivery, checkpoints and resume."""

import pytest
import torch

from fedhet.callbacks import CentroidSync, HeadMixing
from fedhet.callbacks.fedpac import GLOBAL_CENTROIDS, GLOBAL_COUNTS
from fedhet.core import ClientUpdate, ServerState
from fedhet.functional import combination_weights
from fedhet.modules import FedPAC
from fedhet.plugins import FederatedTrainer, Processes, Reporting
from tests.callbacks.helpers import TRAINER, roundtrip


def upload(cid, centroids, counts, h=None, v=None, weight=None, bias=None):
    stats = {"fedpac/centroids": centroids, "fedpac/counts": counts}
    if h is not None:
        stats.update({"fedpac/H": h, "fedpac/v": v, "fedpac/head.weight": weight, "fedpac/head.bias": bias})
    return ClientUpdate(cid, int(counts.sum()), {}, stats)


def test_centroid_sync_weights_by_class_counts_and_skips_absent_classes():
    c1, c2 = torch.tensor([[1.0, 0.0], [0.0, 0.0], [5.0, 5.0]]), torch.tensor([[3.0, 2.0], [1.0, 1.0], [0.0, 0.0]])
    n1, n2 = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([3.0, 2.0, 0.0])
    server = ServerState()
    sync = CentroidSync()
    sync.on_aggregate_end(TRAINER, 0, server, [upload("a", c1, n1), upload("b", c2, n2)])
    expected = torch.tensor([[2.5, 1.5], [1.0, 1.0], [0.0, 0.0]])
    assert torch.allclose(server.statistics[GLOBAL_CENTROIDS], expected)
    assert torch.equal(server.statistics[GLOBAL_COUNTS], torch.tensor([4.0, 2.0, 0.0]))
    restored = CentroidSync()
    restored.load_state_dict(roundtrip(sync.state_dict()))
    assert torch.equal(restored.centroids, sync.centroids)


def test_head_mixing_sends_each_client_its_weighted_head():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 4, 2, generator=g)
    h[2] = h[0] + 0.01
    v = torch.tensor([0.3, 0.1, 0.2])
    weights, biases = torch.randn(3, 4, 2, generator=g), torch.randn(3, 4, generator=g)
    updates = [
        upload(cid, torch.zeros(4, 2), torch.ones(4), h[k], v[k], weights[k], biases[k]) for k, cid in enumerate("abc")
    ]
    server = ServerState(per_client={"z": {"head.bias": torch.zeros(4)}})
    mixing = HeadMixing(record_rounds=[3])
    mixing.on_aggregate_end(TRAINER, 3, server, updates)
    alpha = combination_weights(h, v).float()
    assert torch.allclose(mixing.weights, alpha)
    assert set(server.per_client) == {"a", "b", "c", "z"}  # non-participants keep their last mixed head
    for k, cid in enumerate("abc"):
        assert torch.allclose(server.per_client[cid]["head.weight"], torch.einsum("j,jkd->kd", alpha[k], weights))
        assert torch.allclose(server.per_client[cid]["head.bias"], alpha[k] @ biases)
    assert alpha[0, 2] > 0.3  # the near-identical client 2 is a partner of client 0
    restored = HeadMixing()
    restored.load_state_dict(roundtrip(mixing.state_dict()))
    assert restored.client_ids == ["a", "b", "c"]
    assert torch.equal(restored.recorded[3], mixing.weights)


def test_mixed_head_is_what_the_client_evaluates_with(tmp_path, tiny_federation):
    trainer = FederatedTrainer(
        rounds=2,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(FedPAC(hidden_dims=[8]), tiny_federation)
    slot, _ = trainer.context.load("b")
    assert torch.equal(slot.module.head.weight.detach(), trainer.server_state.per_client["b"]["head.weight"])
    assert torch.equal(slot.module._global_centroids, trainer.server_state.statistics[GLOBAL_CENTROIDS])
    mixing = next(cb for cb in trainer.callbacks if isinstance(cb, HeadMixing))
    assert mixing.weights.shape == (4, 4)
    assert torch.allclose(mixing.weights.sum(1), torch.ones(4))


@pytest.mark.kernels
def test_resume_gives_the_same_metrics(tmp_path, tiny_federation):
    def trainer(root, rounds):
        return FederatedTrainer(
            rounds=rounds,
            processes=Processes(accelerator="cpu"),
            reporting=Reporting(progress_bar=False),
            default_root_dir=root,
        )

    full = trainer(str(tmp_path / "full"), 3)
    full.fit(FedPAC(hidden_dims=[8]), tiny_federation)
    trainer(str(tmp_path / "split"), 2).fit(FedPAC(hidden_dims=[8]), tiny_federation)
    resumed = trainer(str(tmp_path / "split"), 3)
    resumed.fit(FedPAC(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    drop = ("time/", "comm/bytes_up_total", "comm/bytes_down_total")
    last_full = {k: v for k, v in full.history[-1].items() if not k.startswith(drop)}
    last_resumed = {k: v for k, v in resumed.history[-1].items() if not k.startswith(drop)}
    assert last_resumed == last_full
    mixing = next(cb for cb in resumed.callbacks if isinstance(cb, HeadMixing))
    assert mixing.client_ids == ["a", "b", "c", "d"]
