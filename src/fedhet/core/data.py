"""What the engine needs of a federation's data: its clients, their descriptions, each client's loaders."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from fedhet.core.spec import ClientSpec


@runtime_checkable
class ClientData(Protocol):
    """One client's data as the engine reads them (:class:`~fedhet.datamodules.ClientDataModule` implements it).

    An evaluation loader may be empty (``[]``, Lightning's "no loader") when the client has no such split.
    """

    @property
    def spec(self) -> ClientSpec:
        """The client's description."""

    def train_dataloader(self) -> Iterable[Any]:
        """The client's training batches (one pass; shuffled per pass under the engine's seeds)."""

    def val_dataloader(self) -> Iterable[Any]:
        """The client's validation batches."""

    def test_dataloader(self) -> Iterable[Any]:
        """The client's test batches."""


@runtime_checkable
class FederatedData(Protocol):
    """A federation's data: what :class:`~fedhet.plugins.FederatedTrainer` ``fit``, ``validate`` and ``test`` take.

    :class:`~fedhet.datamodules.FederatedDataModule` and every shipped federation implement it, and so does the
    server's view of a deployed federation, whose data stay on the clients
    (:class:`~fedhet.integrations.flower.engine.RemoteFederation`). A federation may also offer the data of the whole
    federation for server-side evaluations (:class:`GlobalData`).
    """

    def setup(self, stage: str | None = None) -> None:
        """Load or build the clients' data for ``stage`` (``"fit"``, ``"validate"``, ``"test"``)."""

    @property
    def client_ids(self) -> list[str]:
        """The clients, in the federation's order."""

    @property
    def specs(self) -> Mapping[str, ClientSpec]:
        """Each client's description, by id."""

    def client(self, client_id: str) -> ClientData:
        """The data of client ``client_id``."""


@runtime_checkable
class GlobalData(Protocol):
    """A federation that also holds held-out samples of the whole feature space (e.g. HyFEM's server evaluation)."""

    def global_dataloader(self, stage: str) -> Iterable[Any]:
        """Batches of the federation's held-out samples for ``stage`` (empty when it has none)."""
