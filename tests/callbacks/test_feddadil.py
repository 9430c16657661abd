"""DictionaryAveraging: the server's rules over atom versions, its checkpoint state, and a resumed federation."""

import pytest
import torch

from fedhet.callbacks import DictionaryAveraging
from fedhet.callbacks.feddadil import ATOM_NAMES, GLOBAL_NAMES
from fedhet.core import ClientUpdate, ServerState
from fedhet.datamodules import RotatedBlobsDomains
from fedhet.modules import FedDaDiL
from fedhet.plugins import FederatedTrainer, Processes, Reporting


class FakeTrainer:
    seed = 0

    def log_dict(self, metrics, step):
        """What a callback reports of its step: not kept here."""


def upload(client_id, features, labels, num_samples=10):
    return ClientUpdate(client_id, num_samples, {}, {ATOM_NAMES[0]: features, ATOM_NAMES[1]: labels})


def versions(count, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        upload(
            f"c{i}",
            torch.randn(2, 5, 3, generator=g),
            torch.softmax(torch.randn(2, 5, 4, generator=g), -1),
            10 * (i + 1),
        )
        for i in range(count)
    ]


def run(rule, updates, round_idx=0):
    callback, server = DictionaryAveraging(rule), ServerState()
    callback.on_aggregate_end(FakeTrainer(), round_idx, server, updates)
    return callback, server.statistics


def test_average_of_identical_versions_is_that_version():
    same = versions(1)[0]
    _, out = run("avg", [same, upload("b", same.statistics[ATOM_NAMES[0]], same.statistics[ATOM_NAMES[1]])])
    for name, global_name in zip(ATOM_NAMES, GLOBAL_NAMES, strict=True):
        torch.testing.assert_close(out[global_name], same.statistics[name])


def test_avg_is_the_uniform_mean_and_weighted_uses_sample_counts():
    updates = versions(3)
    callback, out = run("avg", updates)
    stacked = torch.stack([u.statistics[ATOM_NAMES[0]] for u in updates])
    torch.testing.assert_close(out[GLOBAL_NAMES[0]], stacked.mean(0))
    labels = out[GLOBAL_NAMES[1]]
    torch.testing.assert_close(labels.sum(-1), torch.ones(2, 5))  # a convex combination of probabilities
    assert callback.spread == pytest.approx(float((stacked - stacked.mean(0)).pow(2).sum(-1).mean()))
    _, weighted = run("weighted", updates)
    w = torch.tensor([10.0, 20.0, 30.0])
    torch.testing.assert_close(weighted[GLOBAL_NAMES[0]], torch.einsum("i,i...->...", w / w.sum(), stacked))


def test_random_takes_one_version_fixed_by_seed_and_round():
    updates = versions(4)
    picks = []
    for round_idx in range(6):
        _, out = run("random", updates, round_idx)
        matches = [i for i, u in enumerate(updates) if torch.equal(out[GLOBAL_NAMES[0]], u.statistics[ATOM_NAMES[0]])]
        assert len(matches) == 1
        _, again = run("random", updates, round_idx)
        assert torch.equal(again[GLOBAL_NAMES[1]], updates[matches[0]].statistics[ATOM_NAMES[1]])
        picks.append(matches[0])
    assert len(set(picks)) > 1


def test_uploads_without_atoms_leave_the_server_alone():
    _, out = run("avg", [ClientUpdate("a", 3, {"w": torch.ones(2)})])
    assert out == {}


def test_state_round_trip_and_bad_rule():
    callback, _ = run("avg", versions(2))
    restored = DictionaryAveraging()
    restored.load_state_dict(callback.state_dict())
    for name in ATOM_NAMES:
        torch.testing.assert_close(restored.dictionary[name], callback.dictionary[name])
    assert restored.spread == callback.spread
    with pytest.raises(ValueError, match="rule"):
        DictionaryAveraging("median")


@pytest.mark.kernels
def test_resumed_federation_matches_an_uninterrupted_one(tmp_path):
    def trainer(root, rounds):
        return FederatedTrainer(
            rounds=rounds,
            processes=Processes(accelerator="cpu"),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=str(root),
        )

    def model():
        return FedDaDiL(num_atoms=2, atom_size=12, batch_size=6, target="theta45", barycenter_iters=2)

    def data():
        return RotatedBlobsDomains(samples_per_class=12)

    straight = trainer(tmp_path / "a", 3)
    straight.fit(model(), data())
    trainer(tmp_path / "b", 2).fit(model(), data())
    resumed = trainer(tmp_path / "b", 3)
    resumed.fit(model(), data(), ckpt_path="last")
    for name in GLOBAL_NAMES:
        torch.testing.assert_close(straight.server_state.statistics[name], resumed.server_state.statistics[name])
    for cid, state in straight.store.items():
        torch.testing.assert_close(state.personal["coordinates"], resumed.store[cid].personal["coordinates"])
    callback = next(cb for cb in resumed.callbacks if isinstance(cb, DictionaryAveraging))
    torch.testing.assert_close(callback.dictionary[ATOM_NAMES[0]], straight.server_state.statistics[GLOBAL_NAMES[0]])
