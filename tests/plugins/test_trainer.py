import math

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import FederatedDataModule
from fedhet.functional import weighted_mean
from fedhet.modules import FedAvg, FedBABU, FedPer, FedRep, LocalOnly
from fedhet.plugins import FederatedTrainer, UniformSampler
from fedhet.plugins.storage.checkpoint import load_checkpoint
from tests.conftest import make_client
from tests.trainer_options import trainer_options


def make_trainer(tmp_path, **kwargs):
    kwargs.setdefault("rounds", 2)
    kwargs.setdefault("accelerator", "cpu")
    kwargs.setdefault("enable_progress_bar", False)
    return FederatedTrainer(**trainer_options(default_root_dir=str(tmp_path), **kwargs))


class Recorder(FederatedCallback):
    def __init__(self):
        self.events = []
        self.updates = {}
        self.server = {}
        self.before = {}

    def on_federation_start(self, trainer, module):
        self.events.append("federation_start")

    def on_round_start(self, trainer, round_idx, client_ids):
        self.events.append(f"round_start:{round_idx}")
        self.before[round_idx] = {k: v.clone() for k, v in trainer.server_state.shared.items()}

    def on_client_fit_start(self, client_id):
        self.events.append(f"client_start:{client_id}")

    def on_client_fit_end(self, client_id, update):
        self.events.append(f"client_end:{client_id}")

    def on_aggregate_start(self, round_idx, updates):
        self.events.append("aggregate_start")
        self.updates[round_idx] = updates

    def on_aggregate_end(self, round_idx, server_state):
        self.events.append("aggregate_end")
        self.server[round_idx] = {k: v.clone() for k, v in server_state.shared.items()}

    def on_evaluation_end(self, stage):
        self.events.append(f"evaluation_end:{stage}")

    def on_round_end(self, round_idx):
        self.events.append(f"round_end:{round_idx}")

    def on_federation_end(self):
        self.events.append("federation_end")


def test_hooks_fire_in_order(tmp_path, tiny_federation):
    rec = Recorder()
    make_trainer(tmp_path, rounds=1, callbacks=[rec]).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    clients = [e for c in "abcd" for e in (f"client_start:{c}", f"client_end:{c}")]
    assert rec.events == [
        "federation_start",
        "round_start:0",
        *clients,
        "aggregate_start",
        "aggregate_end",
        "evaluation_end:val",
        "round_end:0",
        "federation_end",
    ]


def test_fedavg_server_state_is_the_sample_weighted_mean(tmp_path, tiny_federation):
    rec = Recorder()
    trainer = make_trainer(tmp_path, callbacks=[rec])
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    for r in range(2):
        updates = rec.updates[r]
        assert [u.client_id for u in updates] == ["a", "b", "c", "d"]
        assert [u.num_samples for u in updates] == [tiny_federation.specs[c].num_train for c in "abcd"]
        expected = weighted_mean([u.shared for u in updates], [u.num_samples for u in updates])
        for name, value in expected.items():
            torch.testing.assert_close(rec.server[r][name], value)
    # bytes accounted are the bytes of the uploads
    sent = sum(t.numel() * t.element_size() for u in rec.updates[1] for t in u.shared.values())
    assert trainer.history[1]["comm/bytes_up"] == sent
    assert trainer.history[1]["comm/bytes_up_total"] == 2 * sent


def test_local_only_sends_nothing_and_keeps_personal_models(tmp_path, tiny_federation):
    rec = Recorder()
    trainer = make_trainer(tmp_path, callbacks=[rec])
    trainer.fit(LocalOnly(hidden_dims=[8]), tiny_federation)
    assert all(u.shared == {} for u in rec.updates[1])
    assert trainer.history[-1]["comm/bytes_up"] == 0
    heads = [trainer.store[c].personal["head.weight"] for c in "abcd"]
    assert not torch.equal(heads[0], heads[1])


def test_fedrep_shares_only_the_body_and_trains_the_head_first(tmp_path, tiny_federation):
    rec = Recorder()
    trainer = make_trainer(tmp_path, callbacks=[rec], rounds=3)
    trainer.fit(FedRep(hidden_dims=[8], head_epochs=2), tiny_federation)
    for updates in rec.updates.values():
        for u in updates:
            assert u.shared
            assert all(k.startswith("body.") for k in u.shared)
    assert set(trainer.server_state.shared) == {"body.1.weight", "body.1.bias"}
    assert set(trainer.store["a"].personal) == {"head.weight", "head.bias"}
    # the server keeps what it had for names nobody uploaded and FedRep never uploads a head
    assert not any(k.startswith("head") for k in trainer.server_state.shared)


def test_fedrep_phases_freeze_the_other_part(tiny_federation):
    tiny_federation.setup()
    module = FedRep(hidden_dims=[8])
    module.setup_client(tiny_federation.specs["a"])
    module.configure_model()
    head, body = module.local_phases()
    module.set_local_phase(head)
    assert [n for n, p in module.named_parameters() if p.requires_grad] == ["head.weight", "head.bias"]
    module.set_local_phase(body)
    assert [n for n, p in module.named_parameters() if p.requires_grad] == ["body.1.weight", "body.1.bias"]
    module.set_local_phase(None)
    assert all(p.requires_grad for p in module.parameters())


def test_sampling_and_full_last_round(tmp_path, tiny_federation):
    rec = Recorder()
    sampler = UniformSampler(fraction=0.5, full_last_round=True)
    make_trainer(tmp_path, rounds=3, sampler=sampler, callbacks=[rec]).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert [len(rec.updates[r]) for r in range(3)] == [2, 2, 4]


def _comparable(history):
    return [{k: v for k, v in m.items() if not k.startswith("time/")} for m in history]


@pytest.mark.kernels
@pytest.mark.parametrize("module_cls", [FedAvg, FedRep, LocalOnly])
def test_resume_gives_the_same_metrics(tmp_path, tiny_federation, module_cls):
    full = make_trainer(tmp_path / "full", rounds=4)
    full.fit(module_cls(hidden_dims=[8], dropout=0.1), tiny_federation)

    first = make_trainer(tmp_path / "split", rounds=2)
    first.fit(module_cls(hidden_dims=[8], dropout=0.1), tiny_federation)
    rec = Recorder()
    resumed = make_trainer(tmp_path / "split", rounds=4, callbacks=[rec])
    resumed.fit(module_cls(hidden_dims=[8], dropout=0.1), tiny_federation, ckpt_path="last")
    assert [e for e in rec.events if e.startswith("round_start")] == ["round_start:2", "round_start:3"]

    assert _comparable(resumed.history) == _comparable(full.history)
    state = load_checkpoint(tmp_path / "split" / "version_0" / "checkpoints" / "last.ckpt")
    assert state.round == 4
    # the resumed CSV log holds every round once
    csv_rows = (tmp_path / "split" / "version_0" / "metrics.csv").read_text().strip().splitlines()
    assert len(csv_rows) == 1 + 4


def test_same_seed_same_run_other_seed_other_run(tmp_path, tiny_federation):
    runs = []
    for i, seed in enumerate([0, 0, 1]):
        trainer = make_trainer(tmp_path / str(i), seed=seed)
        trainer.fit(FedAvg(hidden_dims=[8], dropout=0.2), tiny_federation)
        runs.append(_comparable(trainer.history))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


class FailingFedAvg(FedAvg):
    """Raises, or produces NaN, for chosen clients."""

    def __init__(self, raise_for=(), nan_for=(), **kwargs):
        super().__init__(**kwargs)
        self.raise_for = tuple(raise_for)
        self.nan_for = tuple(nan_for)

    def training_step(self, batch, batch_idx):
        if self.spec.client_id in self.raise_for:
            raise RuntimeError("disk on fire")
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if self.spec.client_id in self.nan_for else loss


def test_failing_clients_are_left_out_and_named(tmp_path, tiny_federation, caplog):
    rec = Recorder()
    trainer = make_trainer(tmp_path, callbacks=[rec])
    trainer.fit(FailingFedAvg(raise_for=["b"], nan_for=["d"], hidden_dims=[8]), tiny_federation)
    assert [u.client_id for u in rec.updates[0]] == ["a", "c"]
    assert trainer.history[0]["clients/failed"] == 2
    assert "client 'b'" in caplog.text
    assert "disk on fire" in caplog.text
    assert "client 'd'" in caplog.text
    for name, value in trainer.server_state.shared.items():
        assert torch.isfinite(value).all(), name


def test_too_many_failures_stop_the_run(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, max_client_failures=0.25)
    with pytest.raises(RuntimeError, match="2 of 4 clients failed.*'b'.*disk on fire"):
        trainer.fit(FailingFedAvg(raise_for=["b", "c"], hidden_dims=[8]), tiny_federation)


def test_evaluation_summaries(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, rounds=1)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    m = trainer.history[0]
    per_client = [m[f"val/acc/{c}"] for c in "abcd"]
    assert m["val/acc_mean"] == pytest.approx(sum(per_client) / 4)
    assert m["val/acc_worst"] == pytest.approx(min(per_client))
    n = {c: tiny_federation.specs[c].num_val for c in "abcd"}
    weighted = sum(n[c] * m[f"val/acc/{c}"] for c in "abcd") / sum(n.values())
    assert m["val/acc_weighted"] == pytest.approx(weighted)
    assert m["val/loss_worst"] == pytest.approx(max(m[f"val/loss/{c}"] for c in "abcd"))


def test_test_from_checkpoint_equals_in_memory(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path)
    trainer.fit(FedRep(hidden_dims=[8]), tiny_federation)
    in_memory = trainer.test(FedRep(hidden_dims=[8]), tiny_federation)
    fresh = make_trainer(tmp_path)
    from_ckpt = fresh.test(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert from_ckpt == in_memory
    assert 0.0 <= from_ckpt["test/acc_mean"] <= 1.0
    assert math.isfinite(from_ckpt["test/loss_weighted"])


def test_fedavg_ft_finetunes_before_evaluation_only(tmp_path, tiny_federation):
    plain = make_trainer(tmp_path / "plain", rounds=1)
    plain.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    ft = make_trainer(tmp_path / "ft", rounds=1)
    ft.fit(FedAvg(hidden_dims=[8], finetune_epochs=2), tiny_federation)
    # same training, same server model; only the evaluation differs
    for name, value in plain.server_state.shared.items():
        torch.testing.assert_close(ft.server_state.shared[name], value)
    assert plain.history[0]["val/loss_mean"] != ft.history[0]["val/loss_mean"]


def test_bad_checkpoints_give_clear_errors(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path)
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    good = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(good.read_bytes()[:100])
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(ValueError, match="truncated"):
        make_trainer(tmp_path).test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path=str(truncated))
    with pytest.raises(ValueError, match="not a fedhet federation checkpoint"):
        make_trainer(tmp_path).test(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path=str(foreign))
    with pytest.raises(ValueError, match="seed"):
        make_trainer(tmp_path, seed=5).fit(FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path=str(good))


def test_bad_trainer_settings_are_refused(tmp_path):
    for kwargs, field in [
        ({"rounds": 0}, "rounds"),
        ({"local_steps": 0}, "local_steps"),
        ({"eval_every": 0}, "eval_every"),
    ]:
        with pytest.raises(ValueError, match=field):
            make_trainer(tmp_path, **kwargs)
    with pytest.raises(ValueError, match="min_clients"):
        make_trainer(tmp_path, sampler=UniformSampler(0.5, min_clients=9)).fit(FedAvg(), _four_clients())


def _four_clients():
    return FederatedDataModule([make_client(c, 20, i) for i, c in enumerate("abcd")])


def test_local_steps_counts_optimizer_steps(tmp_path, tiny_federation):
    rec = Recorder()
    make_trainer(tmp_path, rounds=1, local_steps=7, callbacks=[rec]).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert [u.metrics["steps"] for u in rec.updates[0]] == [7.0] * 4


class RoundCounter(FederatedCallback):
    """A stateful callback: its state must survive a resume."""

    def __init__(self):
        self.seen = []

    def on_round_end(self, round_idx):
        self.seen.append(round_idx)

    def state_dict(self):
        return {"seen": list(self.seen)}

    def load_state_dict(self, state):
        self.seen = list(state["seen"])


def test_callback_state_survives_resume(tmp_path, tiny_federation):
    make_trainer(tmp_path, rounds=2, callbacks=[RoundCounter()]).fit(FedAvg(hidden_dims=[8]), tiny_federation)
    counter = RoundCounter()
    make_trainer(tmp_path, rounds=3, callbacks=[counter]).fit(
        FedAvg(hidden_dims=[8]), tiny_federation, ckpt_path="last"
    )
    assert counter.seen == [0, 1, 2]


def test_mixed_precision_on_cpu(tmp_path, tiny_federation):
    trainer = make_trainer(tmp_path, precision="bf16-mixed")
    trainer.fit(FedAvg(hidden_dims=[8]), tiny_federation)
    assert math.isfinite(trainer.history[-1]["val/acc_mean"])


def test_shared_parameters_must_agree_in_shape_across_clients(tmp_path):
    data = FederatedDataModule([make_client("a", 20, 0, dim=6), make_client("b", 20, 1, dim=5)])
    with pytest.raises(ValueError, match=r"client 'b': shared parameter 'body\.1\.weight'"):
        make_trainer(tmp_path).fit(FedAvg(hidden_dims=[8]), data)
    # a method that shares nothing runs on the same clients
    make_trainer(tmp_path / "local", rounds=1).fit(LocalOnly(hidden_dims=[8]), data)


def test_fedper_shares_the_body_and_trains_body_and_head_together(tmp_path, tiny_federation):
    rec = Recorder()
    trainer = make_trainer(tmp_path, callbacks=[rec], rounds=2)
    trainer.fit(FedPer(hidden_dims=[8]), tiny_federation)
    assert all(set(u.shared) == {"body.1.weight", "body.1.bias"} for u in rec.updates[1])
    assert set(trainer.store["a"].personal) == {"head.weight", "head.bias"}
    assert [u.metrics["steps"] for u in rec.updates[0]] == [3, 2, 3, 2]  # one epoch of batch 8, no separate head epoch
    assert not torch.equal(rec.before[1]["body.1.weight"], trainer.server_state.shared["body.1.weight"])


def test_fedbabu_keeps_the_initial_head_and_finetunes_before_evaluation(tmp_path, tiny_federation):
    rec = Recorder()
    trainer = make_trainer(tmp_path, callbacks=[rec], rounds=2)
    trainer.fit(FedBABU(hidden_dims=[8], finetune_epochs=2), tiny_federation)
    initial = rec.before[0]
    final = trainer.server_state.shared
    assert torch.equal(final["head.weight"], initial["head.weight"])  # never trained, so averaging keeps it
    assert not torch.equal(final["body.1.weight"], initial["body.1.weight"])
    plain = make_trainer(tmp_path / "plain", rounds=2)
    plain.fit(FedBABU(hidden_dims=[8], finetune_epochs=0), tiny_federation)
    assert plain.history[-1]["val/acc_mean"] != trainer.history[-1]["val/acc_mean"]  # fine-tuning changes evaluation


class LogsAConstant(FedAvg):
    """FedAvg whose training_step also logs a per-client constant (its number of training samples)."""

    def training_step(self, batch, batch_idx):
        self.log("train/samples", float(self.spec.num_train))
        return super().training_step(batch, batch_idx)


def test_self_log_in_a_module_reaches_the_rounds_metrics(tmp_path, tiny_federation):
    rec = Recorder()
    trainer = make_trainer(tmp_path, rounds=1, callbacks=[rec])
    trainer.fit(LogsAConstant(hidden_dims=[8]), tiny_federation)
    sizes = [tiny_federation.specs[c].num_train for c in "abcd"]
    assert [u.metrics["train/samples"] for u in rec.updates[0]] == [float(n) for n in sizes]
    assert trainer.history[0]["train/samples_mean"] == pytest.approx(sum(sizes) / len(sizes))
    assert trainer.history[0]["train/loss_mean"] == pytest.approx(sum(u.metrics["loss"] for u in rec.updates[0]) / 4)
