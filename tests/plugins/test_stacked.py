"""Clients trained in stacks (``FederatedTrainer(stack_clients=N)``) give the sequential path's results."""

import math

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import ClientDataModule, FederatedDataModule, HybridFederation, hybrid
from fedhet.modules import (
    FedAvg,
    FedBABU,
    FedPAC,
    FedPer,
    FedProx,
    FedRep,
    GlobalLayers,
    HybridLocal,
    HyFEM,
    LocalOnly,
)
from fedhet.plugins import Checkpointing, Faults, FederatedTrainer, Processes, Reporting, UniformSampler
from fedhet.plugins.clients import stacked as stacked_plugin
from fedhet.plugins.clients.stacked import ELEMENTWISE_OPTIMIZERS, stacked_optimizer
from tests.conftest import make_client
from tests.plugins.test_faults import FAULT_ROUND
from tests.plugins.test_faults import federation as loader_fault_federation
from tests.rounding import FLOAT64, assert_within_rounding
from tests.trainer_options import trainer_options

#: float32 equality across code paths: also run under ATEN_CPU_CAPABILITY=default (`.ci/run`)
pytestmark = pytest.mark.kernels

ROUNDS = 3
# train sizes 12..30 with batch size 8: 2, 3 or 4 steps an epoch, most last batches short
SIZES = {"a": 40, "b": 32, "c": 48, "d": 24, "e": 60, "f": 44, "g": 52, "h": 30}
SGD = {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}
ADAM = {"optimizer": "adam", "lr": 0.01, "weight_decay": 1e-3}


def federation(sizes=SIZES, nudge=False):
    clients = [make_client(cid, n, seed, nudge=nudge) for seed, (cid, n) in enumerate(sizes.items())]
    return FederatedDataModule(clients)


def fit(tmp_path, model, data=None, **kwargs):
    kwargs.setdefault("rounds", ROUNDS)
    trainer = FederatedTrainer(
        **trainer_options(
            processes=Processes(accelerator="cpu"),
            checkpointing=Checkpointing(every=kwargs.pop("checkpoint_every", 0)),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=str(tmp_path),
            **kwargs,
        )
    )
    trainer.fit(model, data if data is not None else federation())
    return trainer


def assert_same_rounds(sequential, stacked):
    """The same clients took part, failed and received the same bytes in every round."""
    assert set(stacked.store) == set(sequential.store)
    for mine, theirs in zip(stacked.history, sequential.history, strict=True):
        assert mine["clients/participants"] == theirs["clients/participants"]
        assert mine["clients/failed"] == theirs["clients/failed"]
        assert mine["comm/bytes_down"] == theirs["comm/bytes_down"]


def assert_same_federation(sequential, stacked, rtol=FLOAT64["rtol"], atol=FLOAT64["atol"]):
    """Every shared and personal tensor and every round's mean training loss agree to ``rtol`` (float64 runs)."""
    close = {"rtol": rtol, "atol": atol}
    torch.testing.assert_close(stacked.server_state.shared, sequential.server_state.shared, **close)
    for cid in sequential.store:
        torch.testing.assert_close(stacked.store[cid].personal, sequential.store[cid].personal, **close)
    for mine, theirs in zip(stacked.history, sequential.history, strict=True):
        assert mine["train/loss_mean"] == pytest.approx(theirs["train/loss_mean"], rel=rtol)
    assert_same_rounds(sequential, stacked)


def assert_stacked_within_rounding(tmp_path, make, data, sequential, stacked, **kwargs):
    """A float32 stacked run is within :data:`tests.rounding.FACTOR` rounding spreads of the sequential one."""
    nudged = fit(tmp_path / "nudged", make(), data(nudge=True), **kwargs)
    assert_within_rounding(sequential, stacked, nudged)
    assert_same_rounds(sequential, stacked)


class StackSpy:
    """Records the size of every stack trained and whether any of its batches was padded."""

    def __init__(self, monkeypatch):
        self.sizes, self.padded = [], False
        train_stack = stacked_plugin.train_stack

        def spy(module, states, batches, phases, *inputs):
            self.sizes.append(len(states))
            self.padded |= any(
                len({len(client[p][s][0]) for client in batches}) > 1
                for p in range(len(phases))
                for s in range(len(batches[0][p]))
            )
            return train_stack(module, states, batches, phases, *inputs)

        monkeypatch.setattr(stacked_plugin, "train_stack", spy)


METHODS = {
    "fedavg": lambda **kw: FedAvg(hidden_dims=[8], **kw),
    "fedrep": lambda **kw: FedRep(hidden_dims=[8], head_epochs=2, **kw),
    "local": lambda **kw: LocalOnly(hidden_dims=[8], **kw),
    "fedper": lambda **kw: FedPer(hidden_dims=[8], **kw),
    "fedbabu": lambda **kw: FedBABU(hidden_dims=[8], **kw),
    "fedprox": lambda **kw: FedProx(hidden_dims=[8], mu=0.5, **kw),  # its proximal term under vmap
}


@pytest.mark.parametrize("optimizer", [SGD, ADAM], ids=["sgd-momentum", "adam"])
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_stacked_equals_sequential(tmp_path, monkeypatch, method, optimizer, dtype):
    torch.set_default_dtype(dtype)  # conftest puts it back

    def make():
        return METHODS[method](**optimizer)

    sequential = fit(tmp_path / "seq", make())
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", make(), stack_clients=3)
    if dtype is torch.float64:
        assert_same_federation(sequential, stacked)
    else:
        assert_stacked_within_rounding(tmp_path, make, federation, sequential, stacked)
    # each round, clients grouped by their steps per epoch (3: a c f, 2: b d h, 4: e g), short batches padded
    assert spy.sizes == [3, 3, 2] * ROUNDS
    assert spy.padded


@pytest.mark.parametrize(
    ("alignment", "collaboration"), [(True, True), (True, False), (False, True)], ids=["fedpac", "fa-only", "cc-only"]
)
def test_stacked_fedpac_equals_sequential(tmp_path, monkeypatch, alignment, collaboration):
    """FedPAC in stacks: its statistics before and after training, alignment to the global centroids, head mixing."""

    def make():
        switches = {"feature_alignment": alignment, "classifier_collaboration": collaboration}
        return FedPAC(hidden_dims=[8], head_epochs=1, lambda_align=1.0, **switches, **SGD)

    sequential = fit(tmp_path / "seq", make())
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", make(), stack_clients=3)
    assert_stacked_within_rounding(tmp_path, make, federation, sequential, stacked)  # statistics and mixed heads too
    assert spy.sizes == [3, 3, 2] * ROUNDS
    if alignment:  # the alignment term ran (rounds after the first have global centroids) and changed the model
        no_alignment = fit(
            tmp_path / "no-fa", FedPAC(hidden_dims=[8], head_epochs=1, lambda_align=0.0, **SGD), stack_clients=3
        )
        gap = max((no_alignment.server_state.shared[k] - v).abs().max() for k, v in stacked.server_state.shared.items())
        assert gap > 1e-4


@pytest.mark.parametrize("client_init", ["server", "continue"])
def test_stacked_hyfem_equals_sequential(tmp_path, monkeypatch, client_init):
    """HyFEM in stacks: restart from the anchors (or not), proximal terms to each client's own anchors, uploads."""

    def make():
        return HyFEM(extractor_dims=[6], hidden_dim=8, mu1=0.3, mu2=0.5, client_init=client_init, **SGD)

    sequential = fit(tmp_path / "seq", make())
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", make(), stack_clients=3)
    assert_stacked_within_rounding(tmp_path, make, federation, sequential, stacked)  # the anchors sent too
    assert spy.sizes == [3, 3, 2] * ROUNDS
    for cid in sequential.store:  # the anchors the server sent and the round count are personal buffers
        assert int(stacked.store[cid].personal["rounds_trained"]) == ROUNDS


def test_stacked_hyfem_on_clients_with_different_blocks(tmp_path, monkeypatch):
    table = {
        "a": {"blocks": ["v0", "v1"], "classes": [0, 1]},
        "b": {"blocks": ["v0", "v1"], "classes": [1, 2, 3]},
        "c": {"blocks": ["v1", "v2"], "classes": [2, 3]},
        "d": {"blocks": ["v0", "v1"], "classes": [0, 3]},
    }
    small = {"num_classes": 4, "num_views": 3, "samples_per_class": 40, "latent_dim": 12, "view_latent_dim": 6}

    def data():  # float32 features whatever the default dtype
        return HybridFederation("synthetic", table, data_args=small, batch_size=16, seed=0)

    def nudged_views(**kwargs):
        x, y, columns = hybrid.synthetic_views(**kwargs)
        return torch.nextafter(x, torch.full_like(x, math.inf)), y, columns

    for make in (lambda: HyFEM(extractor_dims=[5], hidden_dim=6, **SGD), lambda: HybridLocal(extractor_dims=[5])):
        sequential = fit(tmp_path / "seq", make(), data(), local_steps=4)
        stacked = fit(tmp_path / "stack", make(), data(), local_steps=4, stack_clients=4)
        with monkeypatch.context() as patch:
            patch.setitem(hybrid.DATASETS, "synthetic", nudged_views)
            nudged = fit(tmp_path / "nudged", make(), data(), local_steps=4)
        assert_within_rounding(sequential, stacked, nudged)
        assert_same_rounds(sequential, stacked)


def test_stacked_fedprox_applies_its_proximal_term(tmp_path):
    """The stacked FedProx is not FedAvg: the proximal term pulls each client towards the model it received."""
    fedprox = fit(tmp_path / "prox", FedProx(hidden_dims=[8], mu=0.5, **SGD), stack_clients=3)
    fedavg = fit(tmp_path / "avg", FedAvg(hidden_dims=[8], **SGD), stack_clients=3)
    difference = max((fedprox.server_state.shared[k] - v).abs().max() for k, v in fedavg.server_state.shared.items())
    assert difference > 1e-3


def test_local_steps_cycle_the_loader_as_the_sequential_path_does(float64, tmp_path, monkeypatch):
    sequential = fit(tmp_path / "seq", FedAvg(hidden_dims=[8], **ADAM), local_steps=5)
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", FedAvg(hidden_dims=[8], **ADAM), local_steps=5, stack_clients=64)
    assert_same_federation(sequential, stacked)
    assert spy.sizes == [len(SIZES)] * ROUNDS  # every client takes 5 steps: one stack a round
    assert spy.padded  # a short batch ends each pass, in the middle of the 5 steps


def test_sampled_clients_train_in_stacks(float64, tmp_path):
    sizes = {f"c{i:02d}": 24 + 4 * (i % 7) for i in range(20)}
    kwargs = {"sampler": UniformSampler(fraction=0.1), "rounds": 4}
    sequential = fit(tmp_path / "seq", FedPer(hidden_dims=[8], **SGD), federation(sizes), **kwargs)
    stacked = fit(tmp_path / "stack", FedPer(hidden_dims=[8], **SGD), federation(sizes), stack_clients=8, **kwargs)
    assert_same_federation(sequential, stacked)
    assert [h["clients/participants"] for h in stacked.history] == [2.0] * 4


@pytest.mark.parametrize("stack_clients", [1, 100])
def test_stacks_of_one_and_larger_than_the_round(float64, tmp_path, monkeypatch, stack_clients):
    sequential = fit(tmp_path / "seq", FedAvg(hidden_dims=[8], **SGD))
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", FedAvg(hidden_dims=[8], **SGD), stack_clients=stack_clients)
    assert_same_federation(sequential, stacked)
    assert spy.sizes == ([1] * 8 if stack_clients == 1 else [3, 3, 2]) * ROUNDS


class DropoutFedAvg(FedAvg):
    def __init__(self):
        super().__init__(hidden_dims=[8], dropout=0.2)


class KeepsOptimizerState(FedAvg):
    keep_optimizer_state = True


GL_TINY = {"embed_dim": 4, "num_heads": 2, "num_blocks": 1, "width": 8}


def assert_same_optimizer_states(sequential, stacked, rtol=FLOAT64["rtol"], atol=FLOAT64["atol"]):
    for cid in sequential.store:
        mine, theirs = stacked.store[cid].optimizer, sequential.store[cid].optimizer
        if theirs is None:  # a client never sampled keeps no state
            assert mine is None
            continue
        assert mine["param_groups"] == theirs["param_groups"]
        assert mine["state"].keys() == theirs["state"].keys()
        assert mine["state"]  # state was kept
        torch.testing.assert_close(mine["state"], theirs["state"], rtol=rtol, atol=atol)


@pytest.mark.parametrize("optimizer", [SGD, ADAM], ids=["sgd-momentum", "adam"])
def test_kept_optimizer_state_is_stacked_and_unstacked(float64, tmp_path, monkeypatch, optimizer):
    """Each client's momenta / Adam moments and step counts carry over rounds in stacks as one by one."""
    sequential = fit(tmp_path / "seq", KeepsOptimizerState(hidden_dims=[8], **optimizer))
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", KeepsOptimizerState(hidden_dims=[8], **optimizer), stack_clients=3)
    assert_same_federation(sequential, stacked)
    assert_same_optimizer_states(sequential, stacked)
    assert spy.sizes == [3, 3, 2] * ROUNDS


def test_clients_with_different_step_counts_do_not_share_a_stack(float64, tmp_path, monkeypatch):
    """Sampled clients have trained different numbers of rounds: Adam's step counts differ, so do their stacks."""
    sizes = {f"c{i:02d}": 24 for i in range(8)}  # one step count per round for everyone: only the history differs
    kwargs = {"sampler": UniformSampler(fraction=0.5), "rounds": 4}
    model = lambda: KeepsOptimizerState(hidden_dims=[8], **ADAM)  # noqa: E731
    sequential = fit(tmp_path / "seq", model(), federation(sizes), **kwargs)
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", model(), federation(sizes), stack_clients=8, **kwargs)
    assert_same_federation(sequential, stacked)
    assert_same_optimizer_states(sequential, stacked)
    assert len(spy.sizes) > 4  # some round held clients of different histories in separate stacks


@pytest.mark.parametrize("batches_per_epoch", [None, 3], ids=["loader-batches", "batch-aligned"])
def test_stacked_global_layers_equals_sequential(float64, tmp_path, monkeypatch, batches_per_epoch):
    """Global Layers: frozen batch norms (inference mode), attention under vmap, each client's AdamW state kept."""

    def make():
        return GlobalLayers(lr=1e-2, batches_per_epoch=batches_per_epoch, aggregate_every="epoch", **GL_TINY)

    # in float64: AdamW divides by the root of tiny second moments, so in float32 the two paths' different summation
    # orders grow to ~2e-5 here, as large as a small error would be (a wrong batch or state moves a parameter by
    # about the learning rate, 1e-2); in float64 they agree to rounding
    sequential = fit(tmp_path / "seq", make())
    spy = StackSpy(monkeypatch)
    stacked = fit(tmp_path / "stack", make(), stack_clients=8)
    assert_same_federation(sequential, stacked)
    assert_same_optimizer_states(sequential, stacked)
    assert sum(spy.sizes) == len(SIZES) * ROUNDS
    assert max(spy.sizes) > 1


def test_linear_weights_are_stacked_in_the_layout_their_gradient_arrives_in():
    """A linear weight's stacked leaf holds every client's matrix, stored by columns: under ``vmap`` autograd gives
    its gradient in that layout, so a backward never copies it into another one (the premise is checked too)."""
    model = FedAvg(hidden_dims=[6], lr=0.1)
    model.setup_client(make_client("a", 20, 0).spec)
    model.configure_model()
    states = [{name: value + k for name, value in model.state_dict().items()} for k in range(3)]
    leaves = stacked_plugin._stacked_leaves(model, states)
    for name, leaf in leaves.items():
        torch.testing.assert_close(leaf, torch.stack([state[name] for state in states]), rtol=0, atol=0)
    weight = leaves["head.weight"]  # (K, classes, 6)
    assert weight.mT.is_contiguous()
    assert not weight.is_contiguous()
    assert leaves["head.bias"].is_contiguous()
    leaf = weight.detach().requires_grad_()
    features = torch.randn(3, 5, weight.shape[-1])
    (grad,) = torch.autograd.grad(torch.vmap(torch.nn.functional.linear)(features, leaf).square().sum(), leaf)
    assert grad.stride() == leaf.stride()
    torch.testing.assert_close(grad, 2 * torch.einsum("kbo,kbi->koi", features @ leaf.mT, features))


class OwnStep(FedAvg):
    """Overrides the local hooks that the stacked path does not call."""

    def on_train_start(self):
        pass

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * 2


class OwnFedPAC(FedPAC):
    """Overrides training_step below the class that defines sample_losses."""

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * 2


class Lbfgs(FedAvg):
    def configure_optimizers(self):
        return torch.optim.LBFGS(self.parameters())


REFUSED = {
    "own-step": (OwnStep, "OwnStep overrides training_step, on_train_start, which"),
    "fedpac-subclass": (lambda: OwnFedPAC(hidden_dims=[8]), "OwnFedPAC overrides training_step"),
    "dropout": (DropoutFedAvg, r"its layer 'body.3' \(Dropout\) draws random numbers"),
    "batch-norm-in-training-mode": (
        lambda: GlobalLayers(bn_mode="train", **GL_TINY),
        r"its layer 'embedding.norm' \(BatchNorm1d\) normalises with batch statistics",
    ),
    "lbfgs": (Lbfgs, "its optimizer LBFGS is not one of the element-wise optimizers"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_modules_that_cannot_stack_are_refused_before_training(tmp_path, case):
    make, reason = REFUSED[case]
    module = make()
    trainer = FederatedTrainer(
        processes=Processes(accelerator="cpu", stack_clients=4),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path),
    )
    name = type(module).__name__
    with pytest.raises(
        ValueError, match=f"field 'stack_clients' is set, but {name} cannot train clients in stacks: {reason}"
    ):
        trainer.fit(module, federation())
    assert trainer.history == []


def test_mixed_precision_is_refused(tmp_path):
    trainer = FederatedTrainer(
        processes=Processes(accelerator="cpu", precision="bf16-mixed", stack_clients=4),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path),
    )
    with pytest.raises(ValueError, match=r"'stack_clients' needs full precision \('32-true'\)"):
        trainer.fit(FedAvg(hidden_dims=[8]), federation())


def test_stack_clients_is_validated():
    with pytest.raises(ValueError, match="field 'stack_clients' must be at least 1 or None, got 0"):
        FederatedTrainer(processes=Processes(stack_clients=0))
    with pytest.raises(ValueError, match=r"a stacked runner .* and a client time budget .* cannot both be set"):
        FederatedTrainer(processes=Processes(stack_clients=8), faults=Faults(client_time_budget_s=1.0))


class NaNClient(ClientDataModule):
    """A client whose training features turn NaN in round ``FAULT_ROUND`` (after the data checks passed)."""

    calls = 0

    def train_dataloader(self):
        self.calls += 1
        loader = super().train_dataloader()
        if self.calls - 1 != FAULT_ROUND:
            return loader
        return [(x * float("nan"), y) for x, y in loader]


def nan_federation():
    clients = [make_client(cid, n, seed) for seed, (cid, n) in enumerate(SIZES.items())]
    ref = clients[1]
    ref.setup()
    clients[1] = NaNClient("b", ref.train_dataset.x, ref.train_dataset.y, 3, batch_size=8)
    return FederatedDataModule(clients)


def test_a_client_with_nan_data_is_rejected_while_its_stack_aggregates(float64, tmp_path, caplog):
    sequential = fit(tmp_path / "seq", FedRep(hidden_dims=[8], **SGD), nan_federation())
    stacked = fit(tmp_path / "stack", FedRep(hidden_dims=[8], **SGD), nan_federation(), stack_clients=8)
    assert_same_federation(sequential, stacked)
    assert [h["clients/failed"] for h in stacked.history] == [0.0, 1.0, 0.0]
    assert "round 1: client 'b' left out of the aggregate: non-finite upload in ['body.1.weight'" in caplog.text
    for name, value in stacked.server_state.shared.items():
        assert torch.isfinite(value).all(), name


@pytest.mark.parametrize("when", ["create", "iterate"])
def test_a_client_whose_loader_fails_is_a_failed_client(float64, tmp_path, caplog, when):
    sequential = fit(tmp_path / "seq", FedRep(hidden_dims=[8]), loader_fault_federation(when))
    stacked = fit(tmp_path / "stack", FedRep(hidden_dims=[8]), loader_fault_federation(when), stack_clients=8)
    assert_same_federation(sequential, stacked)
    assert [h["clients/failed"] for h in stacked.history] == [0.0, 1.0, 0.0]
    assert "round 1: client 'b' left out of the aggregate: OSError" in caplog.text


class FailingHook(FederatedCallback):
    def __init__(self, hook):
        self.hook = hook

    def on_client_fit_start(self, round_idx, client_id):
        if self.hook == "start" and (round_idx, client_id) == (FAULT_ROUND, "c"):
            raise RuntimeError("callback on fire")

    def on_client_fit_end(self, round_idx, client_id):
        if self.hook == "end" and (round_idx, client_id) == (FAULT_ROUND, "c"):
            raise RuntimeError("callback on fire")


@pytest.mark.parametrize("hook", ["start", "end"])
def test_a_client_whose_hook_raises_is_a_failed_client(float64, tmp_path, caplog, hook):
    sequential = fit(tmp_path / "seq", FedPer(hidden_dims=[8]), callbacks=[FailingHook(hook)])
    stacked = fit(tmp_path / "stack", FedPer(hidden_dims=[8]), callbacks=[FailingHook(hook)], stack_clients=8)
    assert_same_federation(sequential, stacked)
    assert [h["clients/failed"] for h in stacked.history] == [0.0, 1.0, 0.0]
    assert "round 1: client 'c' left out of the aggregate: RuntimeError: callback on fire" in caplog.text


def test_resumed_stacked_run_equals_an_uninterrupted_one(tmp_path):
    full = fit(tmp_path / "full", FedRep(hidden_dims=[8], **ADAM), stack_clients=3)
    fit(tmp_path / "split", FedRep(hidden_dims=[8], **ADAM), stack_clients=3, rounds=2, checkpoint_every=1)
    resumed = FederatedTrainer(
        rounds=ROUNDS,
        processes=Processes(accelerator="cpu", stack_clients=3),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path / "split"),
    )
    resumed.fit(FedRep(hidden_dims=[8], **ADAM), federation(), ckpt_path="last")
    assert_same_federation(full, resumed, rtol=0, atol=0)  # the same kernels in the same order: to the bit


class ModuleWatcher(FederatedCallback):
    """Records what each client's module holds when its fit starts and ends, and its upload."""

    def __init__(self):
        self.start, self.end, self.updates = {}, {}, {}

    def on_client_fit_start(self, client_id, module):
        self.start[client_id] = {k: v.clone() for k, v in module.shared_state_dict().items()}

    def on_client_fit_end(self, client_id, module, update):
        self.end[client_id] = {k: v.clone() for k, v in module.shared_state_dict().items()}
        self.updates[client_id] = update


def test_hooks_see_each_clients_module_before_and_after_training(tmp_path):
    watcher = ModuleWatcher()
    trainer = fit(tmp_path, FedPer(hidden_dims=[8]), rounds=1, stack_clients=3, callbacks=[watcher])
    assert set(watcher.start) == set(watcher.end) == set(SIZES)
    for cid in SIZES:
        assert watcher.start[cid].keys() == {"body.1.weight", "body.1.bias"}
        torch.testing.assert_close(watcher.end[cid], watcher.updates[cid].shared, rtol=0, atol=0)
        assert not torch.equal(watcher.start[cid]["body.1.weight"], watcher.end[cid]["body.1.weight"])
        assert watcher.updates[cid].metrics["steps"] > 0
    assert trainer.history[0]["clients/participants"] == len(SIZES)


@pytest.mark.parametrize("optimizer", ELEMENTWISE_OPTIMIZERS, ids=lambda cls: cls.__name__)
def test_one_optimizer_over_stacked_tensors_equals_one_per_client(optimizer):
    gen = torch.Generator().manual_seed(0)
    module = torch.nn.Linear(3, 2)
    clients = [[torch.randn(2, 3, generator=gen), torch.randn(2, generator=gen)] for _ in range(4)]
    grads = [[[torch.randn(p.shape, generator=gen) for p in client] for client in clients] for _ in range(3)]
    leaves = {name: torch.stack([c[i] for c in clients]) for i, name in enumerate(("weight", "bias"))}
    settings = {"lr": 0.1, "weight_decay": 0.01}
    together = stacked_optimizer(optimizer(module.parameters(), **settings), module, leaves)
    alone = [[p.clone() for p in client] for client in clients]
    singles = [optimizer(params, **settings) for params in alone]
    for step in grads:
        for i, name in enumerate(("weight", "bias")):
            leaves[name].grad = torch.stack([g[i] for g in step])
        together.step()
        for params, single, client_grads in zip(alone, singles, step, strict=True):
            for p, g in zip(params, client_grads, strict=True):
                p.grad = g
            single.step()
    for i, name in enumerate(("weight", "bias")):
        torch.testing.assert_close(leaves[name], torch.stack([params[i] for params in alone]))


def test_non_elementwise_optimizer_is_refused_by_stacked_optimizer():
    module = torch.nn.Linear(3, 2)
    leaves = {name: torch.zeros(2, *p.shape) for name, p in module.named_parameters()}
    with pytest.raises(TypeError, match="LBFGS is not one of the element-wise optimizers"):
        stacked_optimizer(torch.optim.LBFGS(module.parameters()), module, leaves)
