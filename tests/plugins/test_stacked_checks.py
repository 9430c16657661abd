"""The upload checks of stacked clients: their shared part once per stack, everything else per client."""

import torch

from fedhet.callbacks import FederatedCallback
from fedhet.core import ClientUpdate, ExpectedUpload, TensorSpec, UploadDeclaration
from fedhet.modules import FedPer
from fedhet.plugins.clients.context import ClientContext
from fedhet.plugins.uploads.policies import DeclaredUpload, FiniteUpload
from tests.plugins.test_stacked import ROUNDS, SIZES, fit

EXPECTED = ExpectedUpload({"w": TensorSpec((2, 3))}, UploadDeclaration({"c": TensorSpec((2,))}), num_train=5)


def update(**fields):
    values = {"shared": {"w": torch.zeros(2, 3)}, "statistics": {"c": torch.zeros(2)}, "metrics": {"loss": 1.0}}
    return ClientUpdate(client_id="a", num_samples=fields.pop("num_samples", 4), **{**values, **fields})


def test_a_stack_of_shared_parameters_is_checked_as_each_of_its_clients():
    assert EXPECTED.stack_mismatch({"w": torch.zeros(7, 2, 3)}) is None
    assert EXPECTED.stack_mismatch({"w": torch.zeros(7, 3, 2)}) == (
        "shared parameter 'w' has shape (3, 2), expected (2, 3)"
    )
    assert EXPECTED.stack_mismatch({"w": torch.zeros(7, 2, 3, dtype=torch.float64)}) == (
        "shared parameter 'w' has dtype torch.float64, expected torch.float32"
    )
    assert EXPECTED.stack_mismatch({}) == "shared parameter 'w' is missing"


def test_with_the_shared_part_checked_the_rest_of_an_upload_is_still_checked():
    declared, finite = DeclaredUpload(lambda _: EXPECTED), FiniteUpload()
    assert declared.reject(update(shared={}), 0.0, shared_checked=True) is None  # left to the stack's check
    assert declared.reject(update(shared={}), 0.0) is not None
    rejected = {
        "num_samples": update(num_samples=9),
        "statistic": update(statistics={"c": torch.zeros(2), "raw": torch.zeros(5)}),
        "loss": update(metrics={}),
    }
    for field, bad in rejected.items():
        assert declared.reject(bad, 0.0, shared_checked=True) is not None, field
    assert finite.reject(update(statistics={"c": torch.tensor([0.0, float("nan")])}), 0.0, shared_checked=True)
    assert finite.reject(update(metrics={"loss": float("inf")}), 0.0, shared_checked=True)
    assert finite.reject(update(shared={"w": torch.full((2, 3), float("nan"))}), 0.0, shared_checked=True) is None
    assert finite.reject(update(shared={"w": torch.full((2, 3), float("nan"))}), 0.0) is not None


class Seen:
    """A user's upload check: records every upload it is shown (whole) and admits it."""

    def __init__(self):
        self.shared = []

    def reject(self, update, seconds):
        self.shared.append(sorted(update.shared))


def test_stacks_check_their_shared_parameters_once_and_users_checks_see_every_upload(tmp_path, monkeypatch):
    calls = []
    original = ClientContext.shared_checked

    def spy(self, client_id, stacked):
        calls.append({name: tuple(t.shape) for name, t in stacked.items()})
        return original(self, client_id, stacked)

    monkeypatch.setattr(ClientContext, "shared_checked", spy)
    seen = Seen()
    trainer = fit(tmp_path, FedPer(hidden_dims=[8]), stack_clients=8, upload_checks=[seen])
    assert [h["clients/failed"] for h in trainer.history] == [0.0] * ROUNDS
    assert len(seen.shared) == ROUNDS * len(SIZES)
    assert all(names == seen.shared[0] and names for names in seen.shared)
    assert 1 <= len(calls) < len(seen.shared)  # per stack (clients with equal step counts), not per client


class NaNUpload(FederatedCallback):
    """Turns client 'c''s uploaded shared parameters to NaN after its training (a callback may change an upload)."""

    def on_client_fit_end(self, client_id, update):
        if client_id == "c":
            update.shared = {name: torch.full_like(t, float("nan")) for name, t in update.shared.items()}


def test_an_upload_changed_by_a_callback_is_checked_whole(tmp_path, caplog):
    trainer = fit(tmp_path, FedPer(hidden_dims=[8]), stack_clients=8, callbacks=[NaNUpload()])
    assert [h["clients/failed"] for h in trainer.history] == [1.0] * ROUNDS
    assert "client 'c' left out of the aggregate: non-finite upload" in caplog.text
