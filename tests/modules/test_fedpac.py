"""FedPAC's module: uploads, local schedule, statistics, feature alignment, the paper's CNNs, plain Trainer."""

import math

import lightning
import pytest
import torch
from lightning.fabric import Fabric
from torch import nn

from fedhet.callbacks import CentroidSync, FederatedCallback, HeadMixing
from fedhet.callbacks.fedpac import CENTROIDS, COUNTS, GLOBAL_CENTROIDS, GLOBAL_COUNTS, HEAD_H, HEAD_V
from fedhet.core import LocalPhase
from fedhet.datamodules import ClientSpec
from fedhet.functional import class_feature_sums, head_statistics
from fedhet.modules import FedPAC, FedPACNet
from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting
from fedhet.plugins.clients.local_loop import run_local_training
from tests.conftest import make_client, plain_trainer

HEAD_STATS = {"fedpac/head.weight", "fedpac/head.bias"}


def built(client, **kwargs):
    kwargs.setdefault("hidden_dims", [8])
    module = FedPAC(**kwargs)
    module.setup_client(client.spec)
    module.configure_model()
    client.setup("fit")
    module.batches = client.train_dataloader()
    module.local_train_loader = module.batches  # as the engine hands it over during local training
    return module


def train(module, phases):
    fabric = Fabric(accelerator="cpu", devices=1)
    return run_local_training(fabric, module, module.batches, phases, 1, None)


@pytest.mark.parametrize(
    ("fa", "cc", "expected"),
    [
        (True, True, {CENTROIDS, COUNTS, HEAD_H, HEAD_V} | HEAD_STATS),
        (True, False, {CENTROIDS, COUNTS}),
        (False, True, {HEAD_H, HEAD_V} | HEAD_STATS),
        (False, False, set()),
    ],
)
def test_uploads_are_the_body_and_the_declared_statistics(tmp_path, tiny_federation, fa, cc, expected):
    class Uploads(FederatedCallback):
        def __init__(self):
            self.rounds = {}

        def on_aggregate_start(self, round_idx, updates):
            self.rounds[round_idx] = updates

    spy = Uploads()
    module = FedPAC(hidden_dims=[8], feature_alignment=fa, classifier_collaboration=cc)
    trainer = FederatedTrainer(
        rounds=2,
        processes=Processes(accelerator="cpu"),
        checkpointing=Checkpointing(every=0),
        reporting=Reporting(progress_bar=False),
        logger=False,
        callbacks=[spy],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(module, tiny_federation)
    assert len(spy.rounds) == 2
    for updates in spy.rounds.values():
        assert [u.client_id for u in updates] == ["a", "b", "c", "d"]
        for update in updates:
            assert set(update.shared) == {"body.1.weight", "body.1.bias"}  # the MLP body's linear layer only
            assert set(update.statistics) == expected
    per_client = trainer.server_state.per_client
    assert set(per_client) == ({"a", "b", "c", "d"} if cc else set())
    assert (GLOBAL_CENTROIDS in trainer.server_state.statistics) == fa


@pytest.mark.parametrize(("fa", "cc"), [(True, True), (True, False), (False, True), (False, False)])
def test_client_statistics_per_ablation(tiny_federation, fa, cc):
    tiny_federation.setup("fit")
    client = tiny_federation.client("c")
    module = built(client, feature_alignment=fa, classifier_collaboration=cc)
    assert all(name.startswith("body.") for name in module.shared_state_dict())
    assert not any(name.startswith("head.") for name in module.shared_state_dict())
    train(module, module.local_phases())
    stats = module.client_statistics()
    expected = ({CENTROIDS, COUNTS} if fa else set()) | (({HEAD_H, HEAD_V} | HEAD_STATS) if cc else set())
    assert set(stats) == expected
    assert all(not name.startswith("head.") for name in stats)  # a head is never a shared parameter
    callbacks = {type(cb) for cb in module.configure_callbacks()}
    assert callbacks == ({CentroidSync} if fa else set()) | ({HeadMixing} if cc else set())


def test_statistics_use_the_received_body_and_centroids_the_trained_one(tiny_federation):
    tiny_federation.setup("fit")
    client = tiny_federation.client("c")
    module = built(client)
    x, y = client.train_dataset.x, client.train_dataset.y
    with torch.no_grad():
        before = module.body(x)
    train(module, module.local_phases())
    with torch.no_grad():
        after = module.body(x)
    stats = module.client_statistics()
    counts, sums, squares = class_feature_sums(before, y, 3)
    h, v = head_statistics(counts, sums, squares)
    assert torch.allclose(stats[HEAD_H], h, atol=1e-5)
    assert torch.allclose(stats[HEAD_V], v / len(y), atol=1e-6)
    counts, sums, _ = class_feature_sums(after, y, 3)
    assert torch.allclose(stats[CENTROIDS], sums / counts.clamp_min(1)[:, None], atol=1e-5)
    assert torch.equal(stats[COUNTS], counts)
    assert not torch.allclose(before, after)  # the body did train
    assert torch.equal(stats["fedpac/head.weight"], module.head.weight)


def test_phases_train_only_their_part(tiny_federation):
    tiny_federation.setup("fit")
    module = built(tiny_federation.client("a"))
    start = {k: v.clone() for k, v in module.state_dict().items()}
    train(module, [LocalPhase("head", ("head.*",), epochs=1)])
    mid = {k: v.clone() for k, v in module.state_dict().items()}
    assert all(torch.equal(start[k], mid[k]) for k in start if k.startswith("body."))
    assert not torch.equal(start["head.weight"], mid["head.weight"])
    train(module, [LocalPhase("body", ("body.*",))])
    end = module.state_dict()
    assert all(torch.equal(mid[k], end[k]) for k in mid if k.startswith("head."))
    assert not all(torch.equal(mid[k], end[k]) for k in mid if k.startswith("body."))


def test_body_phase_adds_feature_alignment_to_received_centroids(tiny_federation):
    tiny_federation.setup("fit")
    module = built(tiny_federation.client("c"), lambda_align=2.5)
    d = module.head.in_features
    centroids = torch.randn(3, d)
    module.receive_statistics({GLOBAL_CENTROIDS: centroids, GLOBAL_COUNTS: torch.tensor([4.0, 0.0, 2.0])})
    module.on_train_start()  # own pre-training centroids: the fallback of class 1
    x, y = next(iter(module.batches))
    module.set_local_phase(LocalPhase("body", ("body.*",)))
    loss = module.training_step((x, y), 0)
    z = module.body(x)
    targets = torch.where(torch.tensor([True, False, True])[:, None], centroids, module._own_centroids)
    expected = nn.functional.cross_entropy(module.head(z), y) + 2.5 * nn.functional.mse_loss(z, targets[y])
    assert torch.allclose(loss, expected)
    module.set_local_phase(LocalPhase("head", ("head.*",)))
    assert torch.allclose(module.training_step((x, y), 0), nn.functional.cross_entropy(module.head(z), y))


def test_paper_cnns_shapes_and_parameter_counts():
    fmnist, cifar = FedPACNet((1, 28, 28), 10), FedPACNet((3, 32, 32), 10)
    assert sum(p.numel() for p in fmnist.parameters()) == 117_066
    assert sum(p.numel() for p in cifar.parameters()) == 107_690
    z, logits = cifar(torch.zeros(2, 3, 32, 32))
    assert z.shape == (2, 128)
    assert logits.shape == (2, 10)
    module = FedPAC()
    module.setup_client(ClientSpec("img", (1, 28, 28), 10, num_train=4))
    module.configure_model()
    assert module(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    assert isinstance(module.body[0], nn.Conv2d)
    bad = FedPAC(network="cnn")
    bad.setup_client(ClientSpec("flat", (6,), 3, num_train=4))
    with pytest.raises(ValueError, match="network='cnn'"):
        bad.configure_model()


def test_runs_under_a_plain_lightning_trainer():
    lightning.seed_everything(0, verbose=False)
    dm = make_client("solo", 120, 0, dim=5, val_fraction=0.2, test_fraction=0.2)
    module = FedPAC(hidden_dims=[16], lr=0.1)
    trainer = plain_trainer(epochs=4)
    trainer.fit(module, dm)
    assert set(module.client_statistics()) >= {CENTROIDS, HEAD_H, HEAD_V}
    (results,) = trainer.test(module, dm, verbose=False)
    assert math.isfinite(results["test/loss"])
    assert results["test/acc"] > 0.6
    assert all(p.requires_grad for p in module.parameters())


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="lambda_align"):
        FedPAC(lambda_align=-1)
    with pytest.raises(ValueError, match="network"):
        FedPAC(network="resnet")
    module = FedPAC(hidden_dims=[4])
    module.setup_client(ClientSpec("x", (6,), 3, num_train=4))
    module.configure_model()
    with pytest.raises(RuntimeError, match="training batches"):
        module.on_train_start()
