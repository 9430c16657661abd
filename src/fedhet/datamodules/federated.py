"""A federation's data: the set of client datamodules, looked up by client id."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from lightning.pytorch import LightningDataModule
from torch import Tensor

from fedhet.core import ClientSpec
from fedhet.datamodules.client import ClientDataModule

_Federation = TypeVar("_Federation", bound="FederatedDataModule")

_MAX_IDS_SHOWN = 10


def _build_error(federation: FederatedDataModule, err: AttributeError) -> TypeError:
    """The error of ``build_clients`` failing on an attribute, naming a hyperparameter the subclass does not take.

    ``save_hyperparameters()`` (and, under ``fedhet fit``, the CLI) records the arguments of the class that was built,
    so a subclass whose ``__init__`` does not take an argument that its base class's ``build_clients`` reads from
    ``self.hparams`` fails there, on a missing attribute.
    """
    cls = type(federation).__name__
    key = err.__cause__.args[0] if isinstance(err.__cause__, KeyError) and err.__cause__.args else None
    if isinstance(key, str) and key not in federation.hparams:
        base = next(
            (klass.__name__ for klass in type(federation).__mro__ if "build_clients" in vars(klass)),
            "FederatedDataModule",
        )
        return TypeError(
            f"{cls}: argument {key!r} is missing: {base}.build_clients reads the hyperparameter {key!r}, but"
            f" {cls}.__init__ does not take it, so it was not recorded; add {key!r} to the arguments of {cls}.__init__"
        )
    return TypeError(f"{cls}.build_clients failed: {err}")


class FederatedDataModule(LightningDataModule):
    """The clients of a federation, each a :class:`~fedhet.datamodules.ClientDataModule` with its own data.

    Clients are given directly (``clients=``, or :meth:`from_tensors` for a mapping of tensors), or built by a
    subclass in :meth:`build_clients`, e.g. by partitioning a pooled dataset. :meth:`setup` (idempotent) builds the
    clients, sets each one up and checks that they form one federation; the lookups below call it when needed.

    Args:
        clients: the clients, in the order the federation lists them; ``None`` to have :meth:`build_clients` make
            them.

    Example:
        >>> import torch
        >>> data = {"a": (torch.rand(8, 3), torch.arange(8) % 2), "b": (torch.rand(6, 5), torch.zeros(6).long())}
        >>> federation = FederatedDataModule.from_tensors(data, num_classes=2)
        >>> federation.client_ids, federation.specs["b"].input_dim, federation.specs["b"].classes
        (['a', 'b'], 5, (0,))

    """

    def __init__(self, clients: Sequence[ClientDataModule] | None = None) -> None:
        super().__init__()
        self._given_clients = None if clients is None else list(clients)
        self._clients: dict[str, ClientDataModule] | None = None

    @classmethod
    def from_tensors(
        cls: type[_Federation], data: Mapping[str, tuple[Tensor, Tensor]], num_classes: int, **client_kwargs: Any
    ) -> _Federation:
        """Federate your own tensors: one client per entry of ``data``, keyed by client id.

        Args:
            data: ``client_id -> (x, y)``, with ``x`` of shape ``(N_i, *feature_shape_i)`` and ``y`` of shape
                ``(N_i,)``; the clients' feature shapes may differ.
            num_classes: size of the shared label space.
            **client_kwargs: keyword arguments given to every :class:`ClientDataModule`, e.g. ``test_fraction=0.2``
                or ``batch_size=16``.

        Returns:
            the federation, not yet set up.

        """
        return cls(
            clients=[
                ClientDataModule(client_id, x, y, num_classes, **client_kwargs) for client_id, (x, y) in data.items()
            ]
        )

    def build_clients(self) -> list[ClientDataModule]:
        """Make the clients when none were given; subclasses override this. Called once, by :meth:`setup`.

        Returns:
            the clients, in the order the federation lists them.

        Raises:
            NotImplementedError: in this base class, where clients must be given.

        """
        raise NotImplementedError(
            f"{type(self).__name__} was given no clients: pass `clients=` or override `build_clients()`"
        )

    def setup(self, stage: str | None = None) -> None:
        """Build the clients, set each one up and check them; later calls do nothing.

        Args:
            stage: the Lightning stage, passed on to every client's ``setup``.

        Raises:
            ValueError: when there are no clients, two share an id or their ``num_classes`` differ; a client's own
                ``setup`` raises on bad data.

        """
        self._setup_clients(stage)

    @property
    def clients(self) -> dict[str, ClientDataModule]:
        """The clients by id, in the federation's order (a new dict; the modules are shared)."""
        return dict(self._setup_clients())

    @property
    def client_ids(self) -> list[str]:
        """The client ids, in the federation's order."""
        return list(self._setup_clients())

    @property
    def specs(self) -> dict[str, ClientSpec]:
        """Every client's description, by id."""
        return {client_id: client.spec for client_id, client in self._setup_clients().items()}

    @property
    def num_classes(self) -> int:
        """Size of the label space the clients share."""
        return next(iter(self._setup_clients().values())).num_classes

    @property
    def num_clients(self) -> int:
        """Number of clients."""
        return len(self._setup_clients())

    @property
    def declared_num_clients(self) -> int | None:
        """The number of clients as far as it is known without reading any data, for checks before a run starts.

        Returns:
            the number of clients given or built, else a ``num_clients`` hyperparameter (``save_hyperparameters``),
            else ``None``: only :meth:`setup` can tell. Subclasses that know their count otherwise override this.

        """
        if self._clients is not None:
            return len(self._clients)
        if self._given_clients is not None:
            return len(self._given_clients)
        declared = self.hparams.get("num_clients")
        return declared if isinstance(declared, int) else None

    @property
    def declared_num_classes(self) -> int | None:
        """The size of the label space as far as it is known without reading any data (e.g. a deployed server's).

        Returns:
            a ``num_classes`` hyperparameter (``save_hyperparameters``), else ``None``: only :meth:`setup` can tell.
            Subclasses that know it otherwise override this.

        """
        declared = self.hparams.get("num_classes")
        return declared if isinstance(declared, int) and not isinstance(declared, bool) else None

    @property
    def declared_input_features(self) -> int | None:
        """The most features one client's sample has, as far as it is known without reading any data.

        Returns:
            ``None`` here (only :meth:`setup` can tell); subclasses whose features are fixed override this.

        """
        return None

    def client(self, client_id: str) -> ClientDataModule:
        """Look a client up by id.

        Args:
            client_id: the client's id.

        Returns:
            the client's datamodule, set up.

        Raises:
            ValueError: when no client has that id; the message lists known ids.

        """
        return self.select([client_id])[0]

    def select(self, client_ids: Sequence[str]) -> list[ClientDataModule]:
        """Look up the clients a configuration names, checking that each exists and is named once.

        Args:
            client_ids: ids of the clients to select.

        Returns:
            their datamodules, in the order of ``client_ids``.

        Raises:
            ValueError: naming the unknown or repeated ids.

        """
        clients = self._setup_clients()
        unknown = [client_id for client_id in client_ids if client_id not in clients]
        if unknown:
            known = list(clients)
            shown = ", ".join(repr(client_id) for client_id in known[:_MAX_IDS_SHOWN])
            more = f", ... ({len(known)} in all)" if len(known) > _MAX_IDS_SHOWN else ""
            raise ValueError(f"unknown client ids {unknown}; the federation has {shown}{more}")
        repeated = [client_id for client_id, count in Counter(client_ids).items() if count > 1]
        if repeated:
            raise ValueError(f"client ids {repeated} are selected more than once")
        return [clients[client_id] for client_id in client_ids]

    def describe(self) -> list[dict[str, Any]]:
        """One row per client, for printing or logging a summary of the federation.

        Returns:
            rows with keys ``client``, ``input_dim``, ``num_classes_present``, ``num_train``, ``num_val`` and
            ``num_test``.

        """
        return [
            {
                "client": spec.client_id,
                "input_dim": spec.input_dim,
                "num_classes_present": len(spec.classes),
                "num_train": spec.num_train,
                "num_val": spec.num_val,
                "num_test": spec.num_test,
            }
            for spec in self.specs.values()
        ]

    def _setup_clients(self, stage: str | None = None) -> dict[str, ClientDataModule]:
        """Return the clients by id, building, setting up and checking them on the first call."""
        if self._clients is None:
            self._clients = self._build_and_check(stage)
        return self._clients

    def _build_and_check(self, stage: str | None) -> dict[str, ClientDataModule]:
        """Build the clients, check that they form one federation and set each one up."""
        try:
            clients = self._given_clients if self._given_clients is not None else self.build_clients()
        except AttributeError as err:  # re-raised as another type: `hasattr(federation, "client_ids")` would hide it
            raise _build_error(self, err) from err
        if not clients:
            raise ValueError(f"{type(self).__name__} has no clients; a federation needs at least one")
        duplicates = [client_id for client_id, count in Counter(c.client_id for c in clients).items() if count > 1]
        if duplicates:
            raise ValueError(f"client ids must be unique; {duplicates} appear more than once")
        first = clients[0]
        for client in clients:
            if client.num_classes != first.num_classes:
                raise ValueError(
                    f"client '{client.client_id}': field 'num_classes' is {client.num_classes} but client"
                    f" '{first.client_id}' has {first.num_classes}; a federation shares one label space"
                )
        for client in clients:
            client.setup(stage)
        return {client.client_id: client for client in clients}
