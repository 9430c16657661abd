from __future__ import annotations

import pytest
import torch

from fedhet.datamodules import ClientDataModule, FederatedDataModule


def _client(client_id: str, n: int = 8, dim: int = 3, num_classes: int = 4, **kwargs) -> ClientDataModule:
    return ClientDataModule(client_id, torch.rand(n, dim), torch.arange(n) % 2, num_classes, **kwargs)


class _Built(FederatedDataModule):
    def __init__(self, num_clients: int) -> None:
        super().__init__()
        self.num_built = 0
        self.requested = num_clients

    def build_clients(self) -> list[ClientDataModule]:
        self.num_built += 1
        return [_client(f"c{i}") for i in range(self.requested)]


def test_from_tensors_builds_one_client_per_entry_in_order():
    data = {
        "zeta": (torch.rand(10, 3), torch.tensor([0, 1] * 5)),
        "alpha": (torch.rand(6, 7), torch.full((6,), 2)),
    }
    federation = FederatedDataModule.from_tensors(data, num_classes=3, test_fraction=0.5, batch_size=2)
    assert federation.client_ids == ["zeta", "alpha"]
    assert federation.num_clients == 2
    assert federation.num_classes == 3
    specs = federation.specs
    assert specs["zeta"].input_dim == 3
    assert specs["alpha"].input_dim == 7
    assert specs["alpha"].classes == (2,)
    assert (specs["zeta"].num_train, specs["zeta"].num_test) == (5, 5)
    assert federation.client("alpha").batch_size == 2
    assert list(federation.clients) == ["zeta", "alpha"]


def test_build_clients_runs_once_and_setup_is_idempotent():
    federation = _Built(3)
    assert federation.client_ids == ["c0", "c1", "c2"]  # sets up lazily
    federation.setup("fit")
    federation.setup("test")
    assert federation.num_built == 1
    assert federation.client("c1") is federation.clients["c1"]


def test_clients_are_set_up_by_the_federation():
    client = _client("a", test_fraction=0.25)
    FederatedDataModule([client]).setup()
    assert client._splits is not None


def test_duplicate_ids_are_rejected():
    federation = FederatedDataModule([_client("a"), _client("b"), _client("a")])
    with pytest.raises(ValueError, match=r"unique.*\['a'\]"):
        federation.setup()


def test_num_classes_must_agree():
    federation = FederatedDataModule([_client("a"), _client("b", num_classes=5)])
    with pytest.raises(ValueError, match="client 'b': field 'num_classes' is 5 but client 'a' has 4"):
        federation.setup()


def test_a_client_with_bad_data_is_named():
    bad = ClientDataModule("bad", torch.rand(4, 3), torch.tensor([0, 1, 9, 0]), 4)
    with pytest.raises(ValueError, match="client 'bad': field 'y' has label 9"):
        FederatedDataModule([_client("ok"), bad]).setup()


def test_no_clients_is_an_error():
    with pytest.raises(ValueError, match="no clients"):
        FederatedDataModule([]).setup()
    with pytest.raises(NotImplementedError, match="build_clients"):
        FederatedDataModule().setup()


def test_unknown_client_lists_known_ids():
    federation = FederatedDataModule([_client("a"), _client("b")])
    with pytest.raises(ValueError, match=r"unknown client ids \['z'\]; the federation has 'a', 'b'"):
        federation.client("z")


def test_unknown_ids_message_is_bounded_for_large_federations():
    federation = _Built(25)
    with pytest.raises(ValueError, match=r"'c9', \.\.\. \(25 in all\)") as raised:
        federation.client("nope")
    assert "'c10'" not in str(raised.value)


def test_select_returns_clients_in_the_order_named_and_checks_ids():
    federation = _Built(4)
    assert [c.client_id for c in federation.select(["c3", "c0"])] == ["c3", "c0"]
    with pytest.raises(ValueError, match=r"unknown client ids \['x', 'y'\]"):
        federation.select(["c1", "x", "y"])
    with pytest.raises(ValueError, match=r"\['c1'\] are selected more than once"):
        federation.select(["c1", "c2", "c1"])


def test_describe_has_one_row_per_client():
    federation = FederatedDataModule([_client("a", n=10, val_fraction=0.2), _client("b", n=4, dim=5)])
    assert federation.describe() == [
        {"client": "a", "input_dim": 3, "num_classes_present": 2, "num_train": 8, "num_val": 2, "num_test": 0},
        {"client": "b", "input_dim": 5, "num_classes_present": 2, "num_train": 4, "num_val": 0, "num_test": 0},
    ]


def test_clients_property_returns_a_copy():
    federation = _Built(2)
    federation.clients.pop("c0")
    assert federation.client_ids == ["c0", "c1"]
