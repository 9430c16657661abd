"""GlobalLayers: the architecture's parameter counts (specs/gl.md §2.5), label mapping, batch norm, metrics."""

import lightning
import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from fedhet.core import ClientSpec
from fedhet.datamodules import ClientDataModule
from fedhet.functional import balanced_accuracy, binary_auprc, binary_auroc, one_vs_rest
from fedhet.modules import GlobalLayers
from fedhet.modules.global_layers import aligned_batch_size
from fedhet.modules.metrics import ClientMetric

HEART = {"width": 128}
COVERTYPE = {"gated": True, "input_norm": True}
TINY = {"embed_dim": 4, "num_heads": 2, "num_blocks": 1, "width": 8}


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread; several threads crawl on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(spec, **kwargs):
    model = GlobalLayers(**kwargs)
    model.setup_client(spec)
    model.configure_model()
    return model


# ---------------------------------------------------------------------------------------------------- architecture
@pytest.mark.parametrize(
    ("site", "num_features", "total"),
    [("cleveland", 13, 448_339), ("saheart", 9, 415_211), ("faisalabad", 12, 440_057)],
)
def test_heart_parameter_counts(site, num_features, total):
    model = build(ClientSpec(site, (num_features,), num_classes=2, classes=(0, 1)), **HEART)
    assert model.num_parameters() == total == 8_282 * num_features + 340_673
    assert model.num_parameters("global") == 298_688
    assert model.num_outputs == 1
    assert model.num_parameters("private") == total - 298_688


def test_heart_fedavg_parameter_counts():
    model = build(
        ClientSpec("cleveland", (31,), num_classes=2, classes=(0, 1)),
        global_modules=GlobalLayers.all_but_first(),
        label_space="federation",
        **HEART,
    )
    assert model.num_parameters() == 597_415
    assert model.num_parameters("global") == 596_361  # everything but the entity embedding (34 * 31)


@pytest.mark.parametrize(
    ("classes", "total"),
    [((0, 1, 2, 4, 5, 6), 915_954), ((0, 1, 6), 915_423), ((1, 2, 3, 5), 915_600), ((0, 1, 4, 6), 915_600)],
)
def test_covertype_parameter_counts(classes, total):
    model = build(ClientSpec("area", (11,), num_classes=7, classes=classes), **COVERTYPE)
    assert model.num_parameters() == total == 914_892 + 177 * len(classes)
    assert model.num_parameters("global") == 717_640
    parts = {name: sum(p.numel() for p in getattr(model, name).parameters()) for name in ("input_norm", "embedding")}
    assert parts == {"input_norm": 22, "embedding": 374}
    assert sum(p.numel() for p in model.blocks.parameters()) == 8_712


def test_covertype_fedavg_and_centralised_parameter_counts():
    kwargs = {"global_modules": GlobalLayers.all_but_first(input_norm=True), "label_space": "federation"}
    model = build(ClientSpec("area", (11,), num_classes=7, classes=(0, 1, 6)), **COVERTYPE, **kwargs)
    assert model.num_parameters() == 916_131
    assert model.num_parameters("global") == 916_109  # all but the input batch norm
    assert model.num_outputs == 7


def test_global_modules_share_parameters_but_never_batch_norm_statistics():
    model = build(ClientSpec("a", (3,), num_classes=2, classes=(0, 1)), **TINY)
    shared = set(model.shared_state_dict())
    assert shared == {
        name for name, _ in model.named_parameters() if name.split(".")[0] in ("layer2", "layer3", "layer4")
    }
    assert "layer2.norm.running_mean" not in shared
    local = build(ClientSpec("a", (3,), num_classes=2, classes=(0, 1)), global_modules=(), **TINY)
    assert local.shared_state_dict() == {}


def test_rejects_bad_settings():
    with pytest.raises(ValueError, match="global_modules"):
        GlobalLayers(global_modules=("layer9",))
    with pytest.raises(ValueError, match="bn_mode"):
        GlobalLayers(bn_mode="batch")
    with pytest.raises(ValueError, match="a head needs 2"):
        build(ClientSpec("a", (3,), num_classes=3, classes=(2,)), **TINY)


# ---------------------------------------------------------------------------------------------------- labels
def test_client_label_space_maps_federation_labels_to_the_clients_own_classes():
    model = build(ClientSpec("poudre", (4,), num_classes=7, classes=(1, 2, 3, 5)), **TINY)
    assert model.num_outputs == 4
    assert model.head_targets(torch.tensor([1, 2, 3, 5, 0, 6])).tolist() == [0, 1, 2, 3, -1, -1]
    assert model(torch.randn(5, 4)).shape == (5, 4)
    federation = build(
        ClientSpec("poudre", (4,), num_classes=7, classes=(1, 2, 3, 5)), label_space="federation", **TINY
    )
    assert federation.num_outputs == 7
    assert federation.head_targets(torch.tensor([1, 6])).tolist() == [1, 6]


def test_client_signature_separates_columns_and_classes():
    model = GlobalLayers(**TINY)
    spec = ClientSpec("a", (4,), num_classes=7, classes=(0, 1))
    same = ClientSpec("b", (4,), num_classes=7, classes=(0, 1))
    assert model.client_signature(spec) == model.client_signature(same)
    assert model.client_signature(spec) != model.client_signature(ClientSpec("c", (4,), 7, classes=(0, 2)))
    assert model.client_signature(spec) != model.client_signature(ClientSpec("d", (5,), 7, classes=(0, 1)))


def test_two_class_client_trains_one_logit_with_bce():
    model = build(ClientSpec("a", (3,), num_classes=5, classes=(2, 4)), **TINY)
    logits = torch.tensor([[3.0], [-3.0]])
    target = model.head_targets(torch.tensor([4, 2]))  # class 4 is the positive (head class 1)
    assert target.tolist() == [1, 0]
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 0], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(model.loss(logits, target), expected)


# ---------------------------------------------------------------------------------------------------- batch norm
@pytest.mark.parametrize(("bn_mode", "updates"), [("frozen_stats", False), ("train", True)])
def test_bn_mode(bn_mode, updates):
    model = build(ClientSpec("a", (3,), num_classes=2, classes=(0, 1)), bn_mode=bn_mode, **TINY)
    model.train()
    assert model.training
    assert model.layer2.norm.training is updates
    before = model.layer3.norm.running_mean.clone()
    model.training_step((torch.randn(16, 3) + 5, torch.randint(2, (16,))), 0).backward()
    assert (not torch.equal(before, model.layer3.norm.running_mean)) is updates


# ---------------------------------------------------------------------------------------------------- batch alignment
def test_aligned_batch_size():
    assert [aligned_batch_size("c", n, 5) for n in (182, 278, 180)] == [36, 55, 36]
    assert [aligned_batch_size("c", n, 10) for n in (4771, 386, 3508, 2675)] == [477, 38, 350, 267]
    with pytest.raises(ValueError, match="client 'c' has 4 training rows, fewer than batches_per_epoch=5"):
        aligned_batch_size("c", 4, 5)


@pytest.mark.parametrize(("aggregate_every", "steps"), [("epoch", 5), ("step", 1)])
def test_batch_aligned_module_declares_its_steps_batch_size_and_uniform_mean(aggregate_every, steps):
    model = GlobalLayers(batches_per_epoch=5, aggregate_every=aggregate_every, **TINY)
    model.setup_client(ClientSpec("cleveland", (13,), num_classes=2, classes=(0, 1), num_train=182))
    (phase,) = model.local_phases()
    assert (phase.steps, phase.batch_size) == (steps, 36)  # floor(182 / 5)
    assert model.configure_callbacks() == []
    assert model.configure_aggregator().weighting == "uniform"
    assert model.keep_optimizer_state
    (phase,) = GlobalLayers(**TINY).local_phases()
    assert (phase.steps, phase.batch_size) == (None, None)  # the trainer's schedule on the client's own batches


# ---------------------------------------------------------------------------------------------------- metrics
def test_absent_class_scores_half_auroc_and_zero_auprc():
    scores = torch.tensor([[2.0, 0.1, 0.0], [0.0, 2.0, 0.3], [1.5, 0.2, 0.1], [0.1, 1.0, 0.2]])
    target = torch.tensor([0, 1, 0, 1])  # class 2 never occurs
    assert float(one_vs_rest("auroc", scores, target)) == pytest.approx((1 + 1 + 0.5) / 3)
    assert float(one_vs_rest("auprc", scores, target)) == pytest.approx((1 + 1 + 0) / 3)
    assert float(one_vs_rest("auroc", scores, target, absent="skip")) == pytest.approx(1.0)
    assert float(one_vs_rest("auprc", scores, target, absent="skip")) == pytest.approx(1.0)


def test_binary_split_with_one_class_scores_half_auroc():
    scores, target = torch.tensor([[0.3], [1.2], [-0.4]]), torch.tensor([0, 0, 0])
    assert float(one_vs_rest("auroc", scores, target)) == 0.5
    assert float(one_vs_rest("auprc", scores, target)) == 0.0
    assert np.isnan(float(one_vs_rest("auroc", scores, target, absent="skip")))


def test_unknown_labels_are_negatives_for_every_class():
    scores = torch.tensor([[2.0, 0.0], [0.0, 2.0], [5.0, 5.0]])
    assert float(one_vs_rest("auroc", scores, torch.tensor([0, 1, -1]))) == pytest.approx(0.5)
    assert float(balanced_accuracy(torch.tensor([0, 1, 0]), torch.tensor([0, 1, -1]), 2)) == 1.0


def test_ranking_metrics_match_scikit_learn_with_ties():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (200,), generator=g).float()  # many ties
    positive = torch.rand(200, generator=g) < 0.3
    assert float(binary_auroc(scores, positive)) == pytest.approx(roc_auc_score(positive, scores))
    assert float(binary_auprc(scores, positive)) == pytest.approx(average_precision_score(positive, scores))


def test_balanced_accuracy_ignores_classes_without_support():
    preds, target = torch.tensor([0, 0, 1, 2]), torch.tensor([0, 0, 0, 2])
    assert float(balanced_accuracy(preds, target, num_classes=4)) == pytest.approx((2 / 3 + 1) / 2)


def test_binary_threshold_is_on_the_logit():
    logits, target = torch.tensor([[0.3], [0.6], [-1.0]]), torch.tensor([1, 1, 0])
    at_half = ClientMetric("accuracy", 2, threshold=0.5)
    at_half.update(logits, target)
    at_zero = ClientMetric("accuracy", 2, threshold=0.0)
    at_zero.update(logits, target)
    assert float(at_half.compute()) == pytest.approx(2 / 3)  # logit 0.3 (p = 0.57) is still class 0
    assert float(at_zero.compute()) == 1.0
    assert at_half.higher_is_better


# ---------------------------------------------------------------------------------------------------- plain Lightning
def test_runs_under_a_plain_lightning_trainer(tmp_path):
    g = torch.Generator().manual_seed(0)
    y = torch.tensor([1, 3, 4])[torch.randint(3, (60,), generator=g)]
    x = torch.randn(60, 5, generator=g) + y[:, None].float()
    client = ClientDataModule("site", x, y, num_classes=5, test_fraction=0.25, val_fraction=0.15, seed=0)
    model = GlobalLayers(batches_per_epoch=4, lr=1e-2, **TINY)
    client.batch_size = aligned_batch_size(client.spec.client_id, client.spec.num_train, 4)  # as the docstring says
    trainer = lightning.Trainer(
        max_epochs=3,
        limit_train_batches=4,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    trainer.fit(model, client)
    assert trainer.global_step == 12  # 4 aligned batches of floor(n / 4) rows an epoch
    (results,) = trainer.test(model, client, verbose=False)
    assert model.num_outputs == 3
    assert {"test/auroc", "test/balanced_accuracy", "test/acc", "test/auprc", "test/loss"} <= results.keys()
    assert results["test/auroc"] > 0.6
