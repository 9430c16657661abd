"""Fault injection: every kind of client fault is left out of its round's aggregate, named, counted, and nothing else
is lost; past the failure budget the run stops with an error naming the clients."""

import time

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import ClientDataModule, FederatedDataModule
from fedhet.functional import weighted_mean
from fedhet.modules import FedRep
from fedhet.plugins import Checkpointing, Faults, FederatedTrainer, Processes, Reporting
from fedhet.plugins.uploads.policies import ClientFailuresError
from tests.conftest import make_client
from tests.trainer_options import trainer_options

FAULT_ROUND = 1
ROUNDS = 3


class FaultyFedRep(FedRep):
    """FedRep whose client ``faulty`` misbehaves in round ``FAULT_ROUND`` the way ``kind`` says."""

    def __init__(self, kind="none", faulty="b", **kwargs):
        super().__init__(**kwargs)
        self.kind = kind
        self.faulty = faulty
        self.round_idx = 0

    def _misbehaves(self, kind):
        return self.kind == kind and self.spec.client_id == self.faulty and self.round_idx == FAULT_ROUND

    def training_step(self, batch, batch_idx):
        if self._misbehaves("raise"):
            raise RuntimeError("disk on fire")
        if self._misbehaves("straggle") and batch_idx == 0:
            time.sleep(1.5)
        loss = super().training_step(batch, batch_idx)
        if self._misbehaves("nan_loss"):
            return loss * float("nan")
        return loss

    def on_train_end(self):
        super().on_train_end()
        if self._misbehaves("inf_upload"):
            with torch.no_grad():
                self.body[1].weight[0, 0] = float("inf")


class RoundClock(FederatedCallback):
    """Tells the module the round, and records what the server aggregated and what each client kept."""

    def __init__(self):
        self.updates, self.server, self.personal = {}, {}, {}

    def on_client_fit_start(self, round_idx, module):
        module.round_idx = round_idx

    def on_aggregate_start(self, trainer, round_idx, updates):
        self.updates[round_idx] = updates

    def on_aggregate_end(self, trainer, round_idx, server_state):
        self.server[round_idx] = {k: v.clone() for k, v in server_state.shared.items()}
        self.personal[round_idx] = {cid: dict(s.personal) for cid, s in trainer.store.items()}


class FailingLoaderClient(ClientDataModule):
    """A client whose training loader fails in round ``FAULT_ROUND``: at creation or half-way through a pass."""

    def __init__(self, *args, when="create", **kwargs):
        super().__init__(*args, **kwargs)
        self.when = when
        self.calls = 0

    def train_dataloader(self):
        self.calls += 1  # one call per round for this client (FedRep evaluates without adaptation)
        if self.calls - 1 != FAULT_ROUND:
            return super().train_dataloader()
        if self.when == "create":
            raise OSError("cannot open the client's shard")
        return BrokenLoader(super().train_dataloader())


class BrokenLoader:
    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        yield next(iter(self.loader))
        raise OSError("read error in the second batch")


def federation(loader_fault=None):
    clients = [make_client("a", 40, 0, classes=(0, 1)), make_client("c", 48, 2), make_client("d", 24, 3)]
    if loader_fault is None:
        b = make_client("b", 32, 1, classes=(1, 2))
    else:
        ref = make_client("b", 32, 1, classes=(1, 2))
        ref.setup()
        b = FailingLoaderClient(
            "b", ref.train_dataset.x, ref.train_dataset.y, 3, x_val=ref.val_dataset.x, y_val=ref.val_dataset.y,
            batch_size=8, when=loader_fault,
        )  # fmt: skip
    return FederatedDataModule([clients[0], b, *clients[1:]])


FAULTS = {
    # kind: (module kind, loader fault, expected log text, counted as straggler)
    "raise-in-training-step": ("raise", None, "RuntimeError: disk on fire", False),
    "nan-loss": ("nan_loss", None, "non-finite upload in ['body.1.weight', 'body.1.bias']", False),
    "inf-upload": ("inf_upload", None, "non-finite upload in ['body.1.weight']", False),
    "loader-fails-on-creation": ("none", "create", "OSError: cannot open the client's shard", False),
    "loader-fails-mid-pass": ("none", "iterate", "OSError: read error in the second batch", False),
    "straggler": ("straggle", None, "straggler: local training took", True),
}


def run(tmp_path, kind, loader_fault, **kwargs):
    """Fit 3 rounds; returns the trainer and the RoundClock that drove the faults and recorded the rounds."""
    kwargs.setdefault("client_time_budget_s", 1.0)
    clock = RoundClock()
    trainer = FederatedTrainer(
        **trainer_options(
            rounds=ROUNDS,
            processes=Processes(accelerator="cpu"),
            checkpointing=Checkpointing(every=0),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=str(tmp_path),
            callbacks=[clock],
            **kwargs,
        )
    )
    trainer.fit(FaultyFedRep(kind=kind, hidden_dims=[8]), federation(loader_fault))
    return trainer, clock


@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
def test_a_faulty_client_is_left_out_named_and_counted(tmp_path, caplog, fault):
    kind, loader_fault, text, straggler = FAULTS[fault]
    trainer, clock = run(tmp_path, kind, loader_fault)

    assert len(trainer.history) == ROUNDS, "the run goes on"
    assert [u.client_id for u in clock.updates[FAULT_ROUND]] == ["a", "c", "d"]
    for r in set(range(ROUNDS)) - {FAULT_ROUND}:
        assert [u.client_id for u in clock.updates[r]] == ["a", "b", "c", "d"]
    faulty = trainer.history[FAULT_ROUND]
    assert faulty["clients/failed"] == 1
    assert faulty["clients/participants"] == 3
    assert faulty["clients/stragglers"] == float(straggler)
    assert [m["clients/failed"] for m in trainer.history] == [float(r == FAULT_ROUND) for r in range(ROUNDS)]
    assert f"round {FAULT_ROUND}: client 'b' left out of the aggregate" in caplog.text
    assert text in caplog.text

    # nothing but the faulty client's round is lost: the aggregate is exactly the others' uploads...
    updates = clock.updates[FAULT_ROUND]
    expected = weighted_mean([u.shared for u in updates], [u.num_samples for u in updates])
    for name, value in expected.items():
        torch.testing.assert_close(clock.server[FAULT_ROUND][name], value)
    # ...the faulty client keeps the personal state it had before, and every other client's new state is kept
    before, after = clock.personal[FAULT_ROUND - 1], clock.personal[FAULT_ROUND]
    for name, value in before["b"].items():
        assert torch.equal(after["b"][name], value), name
    for cid in "acd":
        assert not torch.equal(after[cid]["head.weight"], before[cid]["head.weight"]), cid
    for value in trainer.server_state.shared.values():
        assert torch.isfinite(value).all()


@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
def test_past_the_failure_budget_the_run_stops_naming_the_client(tmp_path, fault):
    kind, loader_fault, text, _ = FAULTS[fault]
    with pytest.raises(ClientFailuresError, match=rf"round {FAULT_ROUND}: 1 of 4 clients failed.*'b': ") as err:
        run(tmp_path, kind, loader_fault, max_client_failures=0.2)
    assert text in str(err.value)
    assert "max_client_failures=0.2" in str(err.value)
    assert err.value.diverged == (fault in ("nan-loss", "inf-upload"))  # only non-finite uploads: training diverged


def test_without_a_time_budget_a_slow_client_is_waited_for(tmp_path):
    trainer, _ = run(tmp_path, "straggle", None, client_time_budget_s=None)
    assert [m["clients/failed"] for m in trainer.history] == [0.0] * ROUNDS


@pytest.mark.parametrize("budget", [0, -1.0])
def test_time_budget_must_be_positive(tmp_path, budget):
    with pytest.raises(ValueError, match="'client_time_budget_s' must be positive"):
        FederatedTrainer(faults=Faults(client_time_budget_s=budget), default_root_dir=str(tmp_path))


class FailingValClient(ClientDataModule):
    """A client whose validation loader fails in its second evaluation."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = 0

    def val_dataloader(self):
        self.calls += 1
        if self.calls == 2:
            raise OSError("validation shard unreadable")
        return super().val_dataloader()


def test_a_client_whose_evaluation_fails_is_left_out_of_that_evaluation_only(tmp_path, caplog):
    ref = make_client("b", 32, 1, classes=(1, 2))
    ref.setup()
    b = FailingValClient(
        "b", ref.train_dataset.x, ref.train_dataset.y, 3, x_val=ref.val_dataset.x, y_val=ref.val_dataset.y, batch_size=8
    )
    clients = [make_client("a", 40, 0, classes=(0, 1)), b, make_client("c", 48, 2)]
    trainer = FederatedTrainer(
        rounds=ROUNDS,
        processes=Processes(accelerator="cpu"),
        checkpointing=Checkpointing(every=0),
        reporting=Reporting(progress_bar=False),
        logger=False,
        default_root_dir=str(tmp_path / "eval"),
    )
    trainer.fit(FedRep(hidden_dims=[8]), FederatedDataModule(clients))
    assert [m["clients/val_failed"] for m in trainer.history] == [0.0, 1.0, 0.0]
    assert "val/acc/b" not in trainer.history[1]
    assert {"val/acc/a", "val/acc/c"} <= trainer.history[1].keys()
    assert "val/acc/b" in trainer.history[2]
    assert [m["clients/failed"] for m in trainer.history] == [0.0] * ROUNDS  # training was not affected
    assert "round 1: client 'b' left out of the val evaluation: OSError: validation shard unreadable" in caplog.text


@pytest.mark.parametrize(
    ("kinds", "diverged"),
    [(["non_finite", "non_finite"], True), (["non_finite", "error"], False), (["straggler"], False), ([], False)],
)
def test_a_stop_is_divergence_only_when_every_failure_is_non_finite(kinds, diverged):
    assert ClientFailuresError("round 0: ...", kinds).diverged is diverged
