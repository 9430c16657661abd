"""New-client evaluation (``NewClients``): held-out clients never train, then adapt from the final federation."""

from __future__ import annotations

import copy
import csv
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from fedhet.callbacks import FederatedCallback
from fedhet.cli import main
from fedhet.core.seeding import derive_seed, seeded
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FLIC, FedAvg, FedRep, GlobalLayers
from fedhet.plugins import FederatedTrainer, NewClients, Processes, Reporting, UniformSampler
from fedhet.plugins.rounds.new_clients import adapt_new_client, evaluate_new_clients, new_client_module
from tests.conftest import make_client
from tests.test_cli import FEDAVG, read_logs, tiny


class FitSpy(FederatedCallback):
    """Records every client that starts local training."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def on_client_fit_start(self, client_id: str) -> None:
        self.seen.add(client_id)


def make_trainer(tmp_path, sampler, callbacks=(), rounds=2):
    return FederatedTrainer(
        rounds=rounds,
        seed=3,
        sampler=sampler,
        logger=False,
        callbacks=list(callbacks),
        default_root_dir=str(tmp_path),
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
    )


def test_split_is_seeded_sized_by_the_fraction_and_independent_of_order():
    ids = [f"c{i:02d}" for i in range(20)]
    sampler = NewClients(fraction=0.2)
    held = sampler.held_out(ids, seed=7)
    assert len(held) == 4
    assert held == sampler.held_out(ids, seed=7)
    assert sorted(sampler.held_out(list(reversed(ids)), seed=7)) == held  # the set, not the order, decides
    assert any(sampler.held_out(ids, seed=s) != held for s in range(1, 5))
    assert len(NewClients(fraction=0.01).held_out(ids, seed=0)) == 1  # at least one held out
    assert len(NewClients(fraction=0.99).held_out(ids, seed=0)) == 19  # at least one left
    last = NewClients(0.2, sampler=UniformSampler(0.5, full_last_round=True))
    assert last.full_last_round  # the resume check's warning sees the inner sampler's setting
    assert last.sample(ids, 4, 5, seed=7) == [cid for cid in ids if cid not in held]
    for round_idx in range(5):
        sampled = NewClients(0.2, sampler=UniformSampler(0.5)).sample(ids, round_idx, 5, seed=7)
        assert len(sampled) == 8
        assert not set(sampled) & set(held)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"fraction": 0.0}, "fraction"),
        ({"fraction": 1.0}, "fraction"),
        ({"fraction": 0.5, "adapt_epochs": 0}, "adapt_epochs"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, field):
    with pytest.raises(ValueError, match=f"NewClients: field '{field}'"):
        NewClients(**kwargs)


def test_a_federation_too_small_or_a_nested_hold_out_is_refused():
    with pytest.raises(ValueError, match="NewClients: holding clients out needs at least 2 clients"):
        NewClients(fraction=0.5).validate(1)
    with pytest.raises(ValueError, match="UniformSampler: field 'min_clients' is 4 but the federation has only 3"):
        NewClients(fraction=0.25, sampler=UniformSampler(min_clients=4)).validate(4)  # 3 clients left to train
    with pytest.raises(ValueError, match="NewClients: field 'sampler'"):
        NewClients(fraction=0.5, sampler=NewClients(fraction=0.5))


def test_held_out_clients_never_train_and_are_scored_as_an_independent_recomputation(tmp_path, tiny_federation):
    spy = FitSpy()
    sampler = NewClients(fraction=0.25)
    trainer = make_trainer(tmp_path, sampler, [spy])
    trainer.fit(FedRep(hidden_dims=[8], lr=0.1), tiny_federation)
    (held,) = sampler.held_out(tiny_federation.client_ids, seed=3)
    assert spy.seen == set(tiny_federation.client_ids) - {held}
    assert held not in trainer._store
    assert not any(name.endswith(f"/{held}") for h in trainer.history for name in h)  # nor validated
    assert any(name.endswith("/a") or name.endswith("/b") for h in trainer.history for name in h)

    metrics = trainer.test(FedRep(hidden_dims=[8], lr=0.1), tiny_federation)
    assert spy.seen == set(tiny_federation.client_ids) - {held}  # test trains nobody
    assert {"test_new/acc_mean", "test_new/acc_weighted", "test_new/acc_worst"} <= set(metrics)
    assert f"test/acc/{held}" not in metrics
    assert f"test_new/acc/{held}" in metrics
    assert not any(
        name.startswith("test_new/") and name.endswith(("/a", "/b", "/c", "/d")) and held not in name
        for name in metrics
    )

    # by hand: the final body, the new client's initial head, one epoch of SGD on the head alone, the same seed
    context = trainer.context
    module = context.build(held, context.init_seed(held))
    server = trainer.server_state.shared
    module.load_state_dict({**context.initial_personal(held), **{n: v for n, v in server.items()}}, strict=False)
    for name, param in module.named_parameters():
        param.requires_grad_(name.startswith("head."))
    optimizer = module.configure_optimizers()
    data = tiny_federation.client(held)
    with seeded(derive_seed(3, "new_client", trainer.current_round, held)):
        for x, y in data.train_dataloader():
            F.cross_entropy(module(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    module.eval()
    with torch.no_grad():
        pairs = [(module(x).argmax(1), y) for x, y in data.test_dataloader()]
    accuracy = torch.cat([p == y for p, y in pairs]).float().mean().item()
    assert metrics["test_new/acc_mean"] == pytest.approx(accuracy, abs=1e-6)
    assert metrics[f"test_new/acc/{held}"] == pytest.approx(accuracy, abs=1e-6)


def test_the_federation_is_left_as_it_was(tmp_path, tiny_federation):
    sampler = NewClients(fraction=0.5, adapt_epochs=2)
    trainer = make_trainer(tmp_path, sampler)
    trainer.fit(FedRep(hidden_dims=[8], lr=0.1), tiny_federation)
    held = sampler.held_out(tiny_federation.client_ids, seed=3)
    server = copy.deepcopy(trainer.server_state.state_dict())
    store = {cid: copy.deepcopy(trainer._store[cid].personal) for cid in trainer._store}
    slots = {cid: copy.deepcopy(trainer.context.slot(cid).module.state_dict()) for cid in store}

    first = evaluate_new_clients(trainer.context, held, 2, trainer.current_round)
    second = evaluate_new_clients(trainer.context, held, 2, trainer.current_round)
    assert set(first) == set(held)
    assert {c: e.metrics for c, e in first.items()} == {c: e.metrics for c, e in second.items()}
    torch.testing.assert_close(trainer.server_state.state_dict(), server, rtol=0, atol=0)
    assert set(trainer._store) == set(store)
    for cid, personal in store.items():
        torch.testing.assert_close(trainer._store[cid].personal, personal, rtol=0, atol=0)
        torch.testing.assert_close(trainer.context.slot(cid).module.state_dict(), slots[cid], rtol=0, atol=0)


def _clients():
    return FederatedDataModule([make_client(cid, 24, seed) for seed, cid in enumerate("abcd")])


# what each method's new client trains: FedRep its head, FedAvg-FT the whole model, FLIC its embedding towards the
# anchors then its embedding and head, Global Layers its own layers (everything but the global ones)
PHASES = {
    "fedrep": [("new_client", "head.")],
    "fedavg-ft": [("finetune", "*")],
    "flic": [("pretrain", "body.embed."), ("local", "body.embed.")],
    "global-layers": [("new_client", "")],
}

METHODS = {
    "fedrep": lambda: FedRep(hidden_dims=[8]),
    "fedavg-ft": lambda: FedAvg(hidden_dims=[8], finetune_epochs=1),
    "flic": lambda: FLIC(latent_dim=4, hidden_width=8, embedding_hidden_dims=(8,), pretrain_epochs=1),
    "global-layers": lambda: GlobalLayers(embed_dim=4, num_heads=2, num_blocks=1, width=8, lr=1e-2),
}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_adapts_what_it_keeps_personal(tmp_path, method):
    module = METHODS[method]()
    data = _clients()
    data.setup("fit")
    sampler = NewClients(fraction=0.25)
    trainer = make_trainer(tmp_path, sampler, rounds=1)
    trainer.fit(module, data)
    (held,) = sampler.held_out(data.client_ids, seed=3)
    phases = trainer.context.build(held, 0).new_client_phases()
    assert [
        (p.name, p.trainable[0][: len(prefix)]) for p, (_, prefix) in zip(phases, PHASES[method], strict=True)
    ] == PHASES[method]
    joined = new_client_module(trainer.context, held)
    adapted = adapt_new_client(trainer.context, held, 1, trainer.current_round)
    changed = {n for n, p in adapted.named_parameters() if not torch.equal(p, joined.state_dict()[n])}
    assert changed
    if method != "fedavg-ft":  # what the federation shares stays as the server sent it
        assert not any(adapted.is_shared(n) for n in changed)
    metrics = trainer.test(METHODS[method](), data)
    summaries = {name for name in metrics if name.count("/") == 1 and not name.startswith("clients/")}
    names = {name.split("/")[1].rsplit("_", 1)[0] for name in summaries if name.startswith("test_new/")}
    assert names
    assert names == {name.split("/")[1].rsplit("_", 1)[0] for name in summaries if name.startswith("test/")}
    assert all(0.0 <= metrics[f"test_new/{n}_worst"] <= metrics[f"test_new/{n}_mean"] for n in names if "loss" not in n)


def test_new_clients_from_yaml_through_fit_and_test(tmp_path, monkeypatch):
    """``trainer.sampler: NewClients`` in a config file: ``fedhet test`` logs ``test_new/...`` beside ``test/...``."""
    extra = tmp_path / "new_clients.yaml"
    extra.write_text("trainer:\n  sampler: {class_path: fedhet.plugins.NewClients, init_args: {fraction: 0.34}}\n")
    args = ["-c", FEDAVG, "-c", str(extra), *tiny(tmp_path / "runs", rounds=1)]
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    main(["fit", *args])
    main(["test", *args, "--ckpt_path", "last"])
    rows = [row for log in read_logs(tmp_path / "runs").values() for row in log if row.get("test_new/acc_mean")]
    (row,) = rows
    assert 0.0 <= float(row["test_new/acc_worst"]) <= float(row["test_new/acc_mean"]) <= 1.0
    assert row["clients/test_new_failed"] == "0.0"


TWO_PROCESS_CONFIG = """
trainer:
  rounds: 2
  seed: 3
  processes: {accelerator: cpu}
  reporting: {progress_bar: false}
  sampler:
    class_path: fedhet.plugins.NewClients
    init_args:
      fraction: 0.4
      sampler: {class_path: fedhet.plugins.UniformSampler, init_args: {fraction: 0.7}}
model:
  class_path: fedhet.modules.FedRep
  init_args: {hidden_dims: [16], lr: 0.1}
data:
  class_path: fedhet.datamodules.DigitsFederation
  init_args: {num_clients: 5, alpha: 0.5, test_fraction: 0.2, seed: 1}
"""


@pytest.mark.distributed
def test_two_processes_score_the_new_clients_as_one(tmp_path):
    """Each process adapts the held-out clients it owns; the gathered ``test_new/...`` equal one process's."""
    config = tmp_path / "new_clients.yaml"
    config.write_text(TWO_PROCESS_CONFIG)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # same thread count in every process: bitwise-equal float sums
    scores = {}
    for devices in (1, 2):
        root = tmp_path / str(devices)
        args = ["-c", str(config), "--trainer.processes.devices", str(devices), "--trainer.default_root_dir", str(root)]
        for command in (["fit"], ["test", "--ckpt_path", "last"]):
            cmd = [sys.executable, "-m", "fedhet", *command, *args]
            subprocess.run(cmd, check=True, env=env, timeout=300, capture_output=True)
        (row,) = csv.DictReader((root / "version_1" / "metrics.csv").open())
        scores[devices] = {name: value for name, value in row.items() if name.startswith("test_new/") and value}
    # the seeded split holds out client_002 and client_003: one on each process
    assert {"test_new/acc/client_002", "test_new/acc/client_003", "test_new/acc_mean"} <= set(scores[1])
    assert not any(name.endswith(("_000", "_001", "_004")) for name in scores[1])
    assert scores[2] == scores[1]
