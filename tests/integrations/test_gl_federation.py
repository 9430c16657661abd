"""Global Layers under the FederatedTrainer: what is shared, BatchAlignedFedAvg's steps, the baselines' data views."""

from pathlib import Path

import pytest
import torch

from fedhet.callbacks.base import FederatedCallback
from fedhet.cli import FederatedCLI
from fedhet.datamodules import ClientDataModule, FederatedDataModule
from fedhet.datamodules.aligned import AlignedFederation
from fedhet.datamodules.datasets.heart import GL_SITES, HeartFederation
from fedhet.modules import GlobalLayers
from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting
from tests.trainer_options import trainer_options

TINY = {"embed_dim": 4, "num_heads": 2, "num_blocks": 1, "width": 8, "lr": 1e-2}
CONFIGS = Path(__file__).parents[2] / "configs" / "gl"
# three clients with disjoint columns (3, 4 and 5) and partly client-exclusive classes of a 4-class federation
CLIENTS = {"a": (40, 3, (0, 1)), "b": (27, 4, (1, 2, 3)), "c": (33, 5, (0, 3))}


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread; several threads crawl on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def client(cid: str, n: int, dim: int, classes: tuple[int, ...]) -> ClientDataModule:
    g = torch.Generator().manual_seed(n)
    y = torch.tensor(classes)[torch.randint(len(classes), (n + 12,), generator=g)]
    x = torch.randn(n + 12, dim, generator=g) + y[:, None].float()
    return ClientDataModule(cid, x[:n], y[:n], 4, x_test=x[n:], y_test=y[n:], batch_size=4)


def federation() -> FederatedDataModule:
    fed = FederatedDataModule([client(cid, *args) for cid, args in CLIENTS.items()])
    fed.feature_names = {cid: tuple(f"{cid}{j}" for j in range(dim)) for cid, (_, dim, _) in CLIENTS.items()}
    return fed


class Recorder(FederatedCallback):
    """The tensors every client starts each round with, its optimizer steps, and the server's aggregates."""

    def __init__(self) -> None:
        self.loaded: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
        self.steps: dict[tuple[int, str], float] = {}
        self.phases: dict[tuple[int, str], list] = {}
        self.aggregates: list[tuple[dict, list]] = []

    def on_client_fit_start(self, trainer, round_idx, client_id, module):
        self.loaded[(round_idx, client_id)] = {k: v.detach().clone() for k, v in module.state_dict().items()}
        self.phases[(round_idx, client_id)] = module.local_phases()

    def on_client_fit_end(self, trainer, round_idx, client_id, module, update):
        self.steps[(round_idx, client_id)] = update.metrics["steps"]

    def on_aggregate_end(self, trainer, round_idx, server_state, updates):
        self.aggregates.append(({k: v.clone() for k, v in server_state.shared.items()}, list(updates)))


def fit(root, model, data, rounds=2, **kwargs):
    recorder = Recorder()
    trainer = FederatedTrainer(
        **trainer_options(
            rounds=rounds,
            seed=0,
            processes=Processes(accelerator="cpu"),
            checkpointing=Checkpointing(every=0),
            reporting=Reporting(progress_bar=False, eval_every=rounds),
            logger=False,
            callbacks=[recorder],
            default_root_dir=str(root),
            **kwargs,
        )
    )
    trainer.fit(model, data)
    return trainer, recorder


def test_global_layers_identical_across_clients_private_layers_differ(tmp_path):
    model, data = GlobalLayers(batches_per_epoch=3, **TINY), federation()
    trainer, rec = fit(tmp_path, model, data)
    start = {cid: rec.loaded[(1, cid)] for cid in CLIENTS}  # after the first aggregation
    shared_names = [name for name in start["a"] if name.split(".")[0] in ("layer2", "layer3", "layer4")]
    server, updates = rec.aggregates[0]
    assert set(server) == {n for n in shared_names if "running" not in n and "num_batches" not in n}
    for name in server:
        assert torch.equal(start["a"][name], start["b"][name])
        assert torch.equal(start["b"][name], start["c"][name])
        assert torch.equal(start["a"][name], server[name])
        # uniform mean of the uploads, whatever the clients' sizes
        torch.testing.assert_close(server[name], torch.stack([u.shared[name] for u in updates]).mean(0))
    # private layers of equal shape are the clients' own
    for name in ("layer5.linear.weight", "norm_out.weight", "layer1.linear.bias"):
        assert not torch.equal(start["a"][name], start["b"][name])
    assert start["a"]["head.weight"].shape == (1, 8)
    assert start["b"]["head.weight"].shape == (3, 8)
    metrics = trainer.test(model, data)
    assert {"test/auroc_mean", "test/balanced_accuracy_worst", "test/auprc_present/b"} <= metrics.keys()
    assert metrics["test/auroc_mean"] > 0.5


def test_batch_aligned_clients_take_equal_steps_with_their_own_batch_size(tmp_path):
    data = federation()
    trainer, rec = fit(tmp_path, GlobalLayers(batches_per_epoch=3, aggregate_every="epoch", **TINY), data, rounds=3)
    assert set(rec.steps.values()) == {3.0}
    assert len(rec.steps) == 9
    sizes = {
        cid: {phase.batch_size for (_, c), phases in rec.phases.items() if c == cid for phase in phases}
        for cid in CLIENTS
    }
    assert sizes == {"a": {13}, "b": {9}, "c": {11}}  # floor(n_k / 3) of 40, 27 and 33 rows
    assert {data.client(cid).batch_size for cid in CLIENTS} == {4}  # the client datamodules are left as they are


def test_a_client_smaller_than_batches_per_epoch_is_refused_before_any_training(tmp_path):
    data = FederatedDataModule([client(cid, *args) for cid, args in {**CLIENTS, "tiny": (2, 3, (0, 1))}.items()])
    recorder = Recorder()
    options = {"processes": Processes(accelerator="cpu"), "reporting": Reporting(progress_bar=False)}
    trainer = FederatedTrainer(
        **trainer_options(rounds=1, logger=False, callbacks=[recorder], default_root_dir=str(tmp_path), **options)
    )
    with pytest.raises(ValueError, match="client 'tiny' has 2 training rows, fewer than batches_per_epoch=3"):
        trainer.fit(GlobalLayers(batches_per_epoch=3, **TINY), data)
    assert recorder.loaded == {}  # no client started training


def test_local_shares_nothing(tmp_path):
    trainer, rec = fit(tmp_path, GlobalLayers(global_modules=(), **TINY), federation())
    assert rec.aggregates[0][0] == {}
    a, b = rec.loaded[(1, "a")], rec.loaded[(1, "b")]
    assert not torch.equal(a["layer3.linear.weight"], b["layer3.linear.weight"])


def test_fedavg_over_the_union_feature_and_label_space(tmp_path):
    data = AlignedFederation(federation(), layout="union")
    assert [spec.input_dim for spec in data.specs.values()] == [12, 12, 12]
    x = data.client("b").train_dataset.x
    assert torch.count_nonzero(x[:, :3]) == 0
    assert torch.count_nonzero(x[:, 7:]) == 0
    model = GlobalLayers(global_modules=GlobalLayers.all_but_first(), label_space="federation", **TINY)
    _, rec = fit(tmp_path, model, data)
    a, c = rec.loaded[(1, "a")], rec.loaded[(1, "c")]
    assert a["head.weight"].shape == (4, 8)
    assert torch.equal(a["head.weight"], c["head.weight"])
    assert torch.equal(a["blocks.0.w1.weight"], c["blocks.0.w1.weight"])
    assert not torch.equal(a["embedding.weight"], c["embedding.weight"])


def test_union_merges_columns_with_the_same_name():
    fed = federation()
    fed.feature_names = {
        "a": ("age", "sex", "cp"),
        "b": ("sbp", "age", "ldl", "famhist"),
        "c": ("age", "sex", "x", "y", "z"),
    }
    data = AlignedFederation(fed, layout="union")
    assert data.feature_names["a"] == ("age", "sex", "cp", "sbp", "ldl", "famhist", "x", "y", "z")
    torch.testing.assert_close(data.client("b").train_dataset.x[:, 0], fed.client("b").train_dataset.x[:, 1])


def test_pooled_client_for_the_centralised_baseline():
    fed = federation()
    fed.feature_names = {cid: ("area", *(f"{cid}{j}" for j in range(dim - 1))) for cid, (_, dim, _) in CLIENTS.items()}
    data = AlignedFederation(fed, layout="pooled", client_code_column="area")
    assert data.client_ids == ["pooled"]
    spec = data.specs["pooled"]
    assert spec.num_train == 100
    assert spec.num_test == 36
    assert spec.classes == (0, 1, 2, 3)
    assert data.client("pooled").train_dataset.x[:, 0].unique().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="layout='pooled'"):
        AlignedFederation(fed, layout="union", client_code_column="area")


def test_heart_gl_sites_run_batch_aligned(tmp_path):
    data = HeartFederation(sites=GL_SITES, missing="code")
    _, rec = fit(tmp_path, GlobalLayers(batches_per_epoch=5, aggregate_every="epoch", **TINY), data, rounds=1)
    assert [rec.phases[(0, site)][0].batch_size for site in GL_SITES] == [36, 55, 36]  # floor(n_k / 5)
    assert {rec.steps[(0, site)] for site in GL_SITES} == {5.0}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_configs_build_the_paper_settings(path, tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["fedhet"])
    cli = FederatedCLI(args=["-c", str(path), "--trainer.default_root_dir", str(tmp_path)], run=False)
    model = cli.model
    assert isinstance(model, GlobalLayers)
    assert model.batches_per_epoch == (10 if "covertype" in path.name else 5)
    assert (model.lr, model.weight_decay, model.embed_dim, model.num_blocks) == (1e-3, 1e-4, 16, 6)
    method = path.stem.split("_")[-1]
    if method == "local":
        assert model.global_modules == ()
    elif method in ("fedavg", "centralised"):
        assert model.label_space == "federation"
    else:
        assert model.global_modules == ("layer2", "layer3", "layer4")
        assert model.label_space == "client"
    if "covertype" in path.name:
        assert model.gated
        assert model.use_input_norm
        assert model.width is None
    else:
        assert not model.gated
        assert model.width == 128


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("covertype*.yaml")), ids=lambda p: p.stem)
def test_covertype_configs_run_end_to_end_on_the_fixture(path, tmp_path, monkeypatch):
    """Each Covertype config, unchanged but for the data file (the 400-row fixture of the UCI schema) and 1 round
    (``--epochs null``: its length counted in rounds)."""
    from tests.datamodules.datasets.covtype_fixture import FIXTURE

    monkeypatch.setattr("sys.argv", ["fedhet"])
    nested = "federation.init_args." if "\n    federation:" in path.read_text() else ""
    data = {"path": str(FIXTURE), "num_train": "200", "num_val": "60", "download": "false"}
    overrides = [arg for key, value in data.items() for arg in (f"--data.init_args.{nested}{key}", value)]
    cli = FederatedCLI(
        args=["fit", "-c", str(path), "--trainer.default_root_dir", str(tmp_path), "--epochs", "null",
              "--trainer.rounds", "1", "--trainer.reporting.progress_bar", "false", *overrides],
    )  # fmt: skip
    metrics = cli.trainer.history[-1]
    num_clients = 1 if "centralised" in path.stem else 4
    assert metrics["clients/participants"] == num_clients
    assert 0.0 <= metrics["val/acc_mean"] <= 1.0
    assert 0.0 <= metrics["val/auroc_mean"] <= 1.0


def constant_client(cid: str, dim: int, value: float) -> ClientDataModule:
    """8 copies of one row (class 0 of 2): every batch has the same loss, so a step does not depend on the shuffle."""
    x = torch.full((8, dim), value)
    y = torch.zeros(8, dtype=torch.long)
    return ClientDataModule(cid, x, y, 2, x_test=x[:2], y_test=y[:2], batch_size=4)


def hand_computed_global_layers(model_args, starts, specs, aggregate_after):
    """Two clients' global layers after 2 AdamW steps each, averaged uniformly after steps ``aggregate_after``."""
    modules, optimizers = {}, {}
    for cid, state in starts.items():
        module = GlobalLayers(**model_args)
        module.setup_client(specs[cid])
        module.configure_model()
        module.load_state_dict(state)
        modules[cid], optimizers[cid] = module, module.configure_optimizers()
    for step in range(2):
        for cid, module in modules.items():
            module.train()
            x = torch.full((4, specs[cid].input_dim), 1.0 if cid == "a" else -2.0)
            loss = module.loss(module(x), module.head_targets(torch.zeros(4, dtype=torch.long)))
            loss.backward()
            optimizers[cid].step()
            optimizers[cid].zero_grad()
        if step in aggregate_after:
            params = [dict(m.named_parameters()) for m in modules.values()]
            with torch.no_grad():
                for name in (n for n in params[0] if modules["a"].is_shared(n)):
                    mean = (params[0][name] + params[1][name]) / 2
                    for p in params:
                        p[name].copy_(mean)
    return {n: p.detach() for n, p in modules["a"].named_parameters() if modules["a"].is_shared(n)}


@pytest.mark.kernels
@pytest.mark.parametrize(("aggregate_every", "rounds", "aggregate_after"), [("step", 2, (0, 1)), ("epoch", 1, (1,))])
def test_aggregation_after_every_step_or_every_epoch_equals_the_hand_computed_steps(
    aggregate_every, rounds, aggregate_after, tmp_path
):
    args = {**TINY, "label_space": "federation", "batches_per_epoch": 2, "aggregate_every": aggregate_every}
    data = FederatedDataModule([constant_client("a", 3, 1.0), constant_client("b", 4, -2.0)])
    trainer, rec = fit(tmp_path, GlobalLayers(**args), data, rounds=rounds)
    assert {rec.steps[(r, c)] for r in range(rounds) for c in "ab"} == {2.0 / rounds}
    starts = {cid: rec.loaded[(0, cid)] for cid in "ab"}
    expected = hand_computed_global_layers(args, starts, data.specs, aggregate_after)
    assert expected.keys() == trainer.server_state.shared.keys()
    for name, value in expected.items():
        torch.testing.assert_close(trainer.server_state.shared[name], value)
    other = hand_computed_global_layers(args, starts, data.specs, (1,) if aggregate_every == "step" else (0, 1))
    assert any(not torch.allclose(other[n], expected[n]) for n in expected)  # the two schedules differ
