import pytest
import torch

from fedhet.core import ClientState
from fedhet.modules import FedRep
from fedhet.plugins import FederatedTrainer
from fedhet.plugins.client_store import ClientStore, state_bytes
from tests.plugins.test_trainer import _comparable


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
    assert (tmp_path / f"{b'b'.hex()}.pt").is_file()


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


def test_spilling_run_equals_in_memory_run_and_resumes(tmp_path, tiny_federation):
    def trainer(root, rounds, budget):
        return FederatedTrainer(
            rounds=rounds,
            accelerator="cpu",
            enable_progress_bar=False,
            default_root_dir=str(root),
            client_state_budget_mb=budget,
        )

    reference = trainer(tmp_path / "memory", 3, None)
    reference.fit(FedRep(hidden_dims=[8]), tiny_federation)
    spilling = trainer(tmp_path / "disk", 3, 0.0)  # every state but the one in use goes to disk
    spilling.fit(FedRep(hidden_dims=[8]), tiny_federation)
    assert _comparable(spilling.history) == _comparable(reference.history)
    assert spilling.store.num_spilled == 3
    assert reference.store.num_spilled == 0
    assert len(list((tmp_path / "disk" / "client_state" / "rank0").iterdir())) == 3

    first = trainer(tmp_path / "resumed", 2, 0.0)
    first.fit(FedRep(hidden_dims=[8]), tiny_federation)
    resumed = trainer(tmp_path / "resumed", 3, 0.0)
    resumed.fit(FedRep(hidden_dims=[8]), tiny_federation, ckpt_path="last")
    assert _comparable(resumed.history) == _comparable(reference.history)
