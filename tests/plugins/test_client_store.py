import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedhet.callbacks import FederatedCallback
from fedhet.core import ClientState
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedRep
from fedhet.plugins import ClientStates, FederatedTrainer, Processes, Reporting
from fedhet.plugins.storage.checkpoint import load_checkpoint
from fedhet.plugins.storage.client_store import ClientStore, state_bytes
from tests.conftest import make_client
from tests.plugins.test_trainer import _comparable
from tests.trainer_options import trainer_options


def _state(value: float, n: int = 8, optimizer: bool = False) -> ClientState:
    opt = {"state": {0: {"momentum_buffer": torch.full((n,), -float(value))}}, "param_groups": [{"lr": 0.1}]}
    return ClientState({"w": torch.full((n,), float(value))}, opt if optimizer else None)


def test_without_budget_nothing_is_written(tmp_path):
    store = ClientStore()
    for i in range(50):
        store[f"c{i}"] = _state(i)
    assert len(store) == 50
    assert store.num_spilled == 0
    assert not any(tmp_path.iterdir())


def test_memory_stays_within_the_budget_and_states_come_back_equal(tmp_path):
    budget = 3 * 32  # three states of 8 float32
    store = ClientStore(budget, tmp_path / "spill")
    for i in range(10):
        store[f"c{i}"] = _state(float(i))
        assert store.memory_bytes <= budget
    assert store.num_spilled == 7
    assert len(store) == 10
    assert len(list((tmp_path / "spill").iterdir())) == 7
    for i in range(10):  # reading a spilled state brings it back unchanged and spills another one
        assert torch.equal(store[f"c{i}"].personal["w"], torch.full((8,), float(i)))
        assert store.memory_bytes <= budget
    assert sorted(store) == sorted(f"c{i}" for i in range(10))


def test_least_recently_used_states_go_to_disk_first(tmp_path):
    store = ClientStore(2 * 32, tmp_path)
    store["a"], store["b"] = _state(1), _state(2)
    store["a"]  # "a" is now the most recent
    store["c"] = _state(3)
    assert "b" in store
    assert store.num_spilled == 1
    assert store.path_of("b").is_file()


def test_optimizer_state_is_counted_and_restored(tmp_path):
    state = _state(2.0, optimizer=True)
    assert state_bytes(state) == 2 * 32
    store = ClientStore(0, tmp_path)
    store["x"], store["y"] = state, _state(1.0, optimizer=True)
    restored = store["x"]
    assert torch.equal(restored.optimizer["state"][0]["momentum_buffer"], torch.full((8,), -2.0))
    assert restored.optimizer["param_groups"] == [{"lr": 0.1}]


def test_overwrite_delete_and_clear(tmp_path):
    store = ClientStore(32, tmp_path / "spill")
    store["a"], store["b"] = _state(1), _state(2)
    store["a"] = _state(5)  # overwriting a spilled state removes its file
    assert store.num_spilled == 1
    assert float(store["a"].personal["w"][0]) == 5
    del store["b"]
    assert "b" not in store
    assert len(store) == 1
    with pytest.raises(KeyError):
        store["b"]
    store["b"] = _state(2)
    store.clear()
    assert len(store) == 0
    assert not (tmp_path / "spill").exists()


def test_a_budget_needs_a_folder():
    with pytest.raises(ValueError, match="spill_dir"):
        ClientStore(10)
    with pytest.raises(ValueError, match="memory_budget_bytes"):
        ClientStore(-1, "x")


@pytest.mark.kernels
def test_spilling_run_equals_in_memory_run_and_resumes(tmp_path, tiny_federation):
    def trainer(root, rounds, budget):
        return FederatedTrainer(
            rounds=rounds,
            processes=Processes(accelerator="cpu"),
            client_state=ClientStates(budget_mb=budget),
            reporting=Reporting(progress_bar=False),
            default_root_dir=str(root),
        )

    reference = trainer(tmp_path / "memory", 3, None)
    reference.fit(FedRep(hidden_dims=[8]), tiny_federation)
    spilling = trainer(tmp_path / "disk", 3, 0.0)  # every state but the one in use goes to disk
    spilling.fit(FedRep(hidden_dims=[8]), tiny_federation)
    assert _comparable(spilling.history) == _comparable(reference.history)
    assert spilling.store.num_spilled == 3
    assert reference.store.num_spilled == 0
    assert len(list(spilling.store.spill_dir.iterdir())) == 3

    first = trainer(tmp_path / "resumed", 2, 0.0)
    first.fit(FedRep(hidden_dims=[8]), tiny_federation)
    resumed = trainer(tmp_path / "resumed", 3, 0.0)
    resumed.fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert _comparable(resumed.history) == _comparable(reference.history)


# ---------------------------------------------------------------- nothing lost on an I/O error (issue 16, item 1)
@pytest.mark.parametrize("client_id", ["x" * 200, "caf\u00e9-\ud800", "a/b", "../up", ""])
def test_any_client_id_spills_and_comes_back(tmp_path, client_id):
    store = ClientStore(32, tmp_path / "spill")
    store[client_id], store["other"] = _state(7.0), _state(1.0)
    assert store.num_spilled == 1
    assert len(store.path_of(client_id).name) == len(store.path_of("other").name)
    assert [p.parent for p in (tmp_path / "spill").iterdir()] == [tmp_path / "spill"]
    assert torch.equal(store[client_id].personal["w"], torch.full((8,), 7.0))
    assert dict(store.state_dicts()).keys() == {client_id, "other"}


def _failing_save(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_spill_keeps_the_state_in_memory_and_warns_once(tmp_path, monkeypatch, caplog):
    store = ClientStore(32, tmp_path / "spill")
    store["a"], store["b"] = _state(1.0), _state(2.0)  # "a" on disk
    monkeypatch.setattr(torch, "save", _failing_save)  # the disk is full from now on
    with caplog.at_level(logging.WARNING, logger="fedhet.plugins.storage.client_store"):
        assert float(store["a"].personal["w"][0]) == 1.0  # reading "a" must push "b" out, which fails
        store["c"] = _state(3.0)
        store["d"] = _state(4.0)
    assert [r.getMessage().count("No space left") for r in caplog.records] == [1]
    assert {cid: float(store[cid].personal["w"][0]) for cid in "abcd"} == {"a": 1, "b": 2, "c": 3, "d": 4}
    assert store.memory_bytes == 4 * 32  # over the budget rather than lost
    assert not [p for p in (tmp_path / "spill").iterdir() if p.suffix == ".tmp"]
    monkeypatch.undo()  # space again: the next write spills down to the budget
    store["e"] = _state(5.0)
    assert store.memory_bytes == 32
    assert {cid: float(store[cid].personal["w"][0]) for cid in "abcde"} == dict(zip("abcde", range(1, 6), strict=True))


def test_a_failed_read_names_the_client_and_keeps_its_file(tmp_path, monkeypatch):
    store = ClientStore(32, tmp_path / "spill")
    store["a"], store["b"] = _state(1.0), _state(2.0)
    path = store.path_of("a")

    def failing_load(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(torch, "load", failing_load)
    with pytest.raises(RuntimeError, match="client 'a': its spilled state"):
        store["a"]
    monkeypatch.undo()
    assert path.is_file()
    assert float(store["a"].personal["w"][0]) == 1.0
    assert not path.exists()  # deleted once the state is back


def _spilling_trainer(root, rounds=2, **kwargs):
    return FederatedTrainer(
        **trainer_options(
            rounds=rounds,
            processes=Processes(accelerator="cpu"),
            client_state=ClientStates(budget_mb=0.0),
            reporting=Reporting(progress_bar=False),
            default_root_dir=str(root),
            **kwargs,
        )
    )


def test_a_client_with_a_long_id_keeps_its_state_and_reaches_the_checkpoint(tmp_path):
    long_id = "client-" + "\u00e9" * 120  # 247 UTF-8 bytes: longer than a file name may be
    federation = FederatedDataModule(
        [make_client("a", 40, 0, classes=(0, 1)), make_client(long_id, 32, 1), make_client("c", 48, 2)]
    )
    reference = FederatedTrainer(
        rounds=3,
        processes=Processes(accelerator="cpu"),
        reporting=Reporting(progress_bar=False),
        default_root_dir=str(tmp_path),
    )
    reference.fit(FedRep(hidden_dims=[8]), federation)
    spilling = _spilling_trainer(tmp_path / "disk", rounds=3)
    spilling.fit(FedRep(hidden_dims=[8]), federation)
    assert _comparable(spilling.history) == _comparable(reference.history)
    clients = load_checkpoint(tmp_path / "disk" / "version_0" / "checkpoints" / "last.ckpt").clients
    assert set(clients) == {"a", long_id, "c"}
    for name, value in reference.store[long_id].personal.items():
        assert torch.equal(clients[long_id]["personal"][name], value)


# ---------------------------------------------------------------- a folder owned by the run (issue 16, item 2)
def test_two_stores_on_one_folder_are_refused(tmp_path):
    first = ClientStore(32, tmp_path / "spill")
    with pytest.raises(RuntimeError, match="in use by another client store"):
        ClientStore(32, tmp_path / "spill")
    first.close()
    ClientStore(32, tmp_path / "spill").close()  # free again once the first is closed


class SecondProcess(FederatedCallback):
    """While the run trains, what `fedhet test --ckpt_path last` on the same root does."""

    def __init__(self, root, federation):
        self.root, self.federation, self.metrics = root, federation, None

    def on_round_end(self, round_idx):
        if round_idx == 1:  # the run has written last.ckpt after round 0
            self.metrics = _spilling_trainer(self.root).test(FedRep(hidden_dims=[8]), self.federation, "last")


def test_a_second_trainer_on_the_same_root_leaves_the_live_runs_states(tmp_path, tiny_federation):
    reference = _spilling_trainer(tmp_path / "alone", rounds=3)
    reference.fit(FedRep(hidden_dims=[8]), tiny_federation)
    second = SecondProcess(tmp_path / "shared", tiny_federation)
    live = _spilling_trainer(tmp_path / "shared", rounds=3, callbacks=[second])
    live.fit(FedRep(hidden_dims=[8]), tiny_federation)
    assert second.metrics  # the second trainer did evaluate from the live run's checkpoint
    assert _comparable(live.history) == _comparable(reference.history)


RUN_AND_EXIT = """
import sys
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FedRep
from fedhet.plugins import FederatedTrainer
from fedhet.plugins import ClientStates, Processes, Reporting
from tests.conftest import make_client

root, keep = sys.argv[1], sys.argv[2] == "keep"
federation = FederatedDataModule([make_client(c, 24, i) for i, c in enumerate("abcd")])
trainer = FederatedTrainer(rounds=1, processes=Processes(accelerator="cpu"), reporting=Reporting(progress_bar=False),
                           default_root_dir=root, client_state=ClientStates(budget_mb=0.0, keep_spilled=keep))
trainer.fit(FedRep(hidden_dims=[8]), federation)
folder = trainer.store.spill_dir
(folder / "notes.txt").write_text("not the store's")
print(folder, len(list(folder.glob("*.pt"))))
"""


@pytest.mark.slow
@pytest.mark.parametrize("keep", [False, True])
def test_the_spill_folder_goes_at_the_end_of_the_run_unless_kept(tmp_path, keep):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_EXIT, str(tmp_path), "keep" if keep else "drop"],
        capture_output=True, text=True, env=env, check=True, timeout=300,
    )  # fmt: skip
    folder, spilled_during_run = done.stdout.split()
    folder = Path(folder)
    assert folder.parent == tmp_path / "version_0" / "client_state"
    assert int(spilled_during_run) == 3
    assert len(list(folder.glob("*.pt"))) == (3 if keep else 0)
    assert (folder / "notes.txt").read_text() == "not the store's"  # a file the store did not write stays
    assert not Path(f"{folder}.lock").exists()  # a kept folder has none: a killed run's has one (remove_dead_spills)


def test_in_memory_lists_the_held_states_without_touching_their_order(tmp_path):
    store = ClientStore(2 * 32, tmp_path)
    store["a"], store["b"] = _state(1), _state(2)
    store["a"]  # "a" is now the most recent
    store["c"] = _state(3)  # "b" spills
    held = store.in_memory()
    assert list(held) == ["a", "c"]
    assert torch.equal(held["c"].personal["w"], torch.full((8,), 3.0))
    store["b"]  # read back: "a" is now the least recent and spills
    assert list(store.in_memory()) == ["c", "b"]
