"""The fedhet engine split in two for Flower: one client's local work on a SuperNode, the round loop on the server.

This is the only module of the adapter that reaches into :class:`~fedhet.plugins.FederatedTrainer` 's internals
(``_launch``, ``_prepare``, ``_fit_client``, ``_evaluate_client``, ``_admit``, ``_slot``, ``_store``), so that the
client's side runs *exactly* the engine's own local loop (phases, seeds from ``(seed, round, client)``, uploads,
client-side callbacks) and the server's side the engine's own round (sampling, aggregation, server-side callbacks,
summaries, logging, checkpoints). When the engine exposes a client-runner component, these two classes become one.
"""

from __future__ import annotations

import shlex
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule
from torch import Tensor

from fedhet.cli import FederatedCLI
from fedhet.datamodules.spec import ClientSpec
from fedhet.plugins.state import ClientFailure, ClientState, ClientUpdate, RoundUploads, ServerState, num_bytes
from fedhet.plugins.trainer import FederatedTrainer

#: What a remote call returns per client: its reply, or the reason it gave none (an error, no reply in time).
Replies = dict[str, Any]


def load_run(
    config: str | Path, args: Sequence[str] = (), trainer_class: type[FederatedTrainer] = FederatedTrainer
) -> tuple[FederatedTrainer, LightningModule, Any]:
    """Build trainer, module and federated datamodule from a ``fedhet fit`` config, as the CLI does, without running.

    Args:
        config: the YAML config (the one ``fedhet fit -c`` takes).
        args: further command-line overrides, e.g. ``["--trainer.rounds", "3"]``.
        trainer_class: the trainer to build (a :class:`~fedhet.plugins.FederatedTrainer` subclass).

    """
    with warnings.catch_warnings():  # Lightning would print this process's own argv (e.g. Flower's token) in a warning
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = FederatedCLI(args=["-c", str(config), *args], run=False, trainer_class=trainer_class)
    return cli.trainer, cli.model, cli.datamodule  # type: ignore[return-value]


def split_args(text: str) -> list[str]:
    """Command-line overrides written as one string (a Flower run-config value), split as a shell would."""
    return shlex.split(text)


class ClientRunner:
    """One client of a federation, trained and evaluated by the engine's own local loop, on the client's machine.

    Every call rebuilds nothing that outlives it: the client's state comes in and goes out as a
    :class:`~fedhet.plugins.state.ClientState` (kept by the caller, e.g. in Flower's ``Context.state``), the server's
    payload and statistics come in with the call. Calls of the same round and client give the same result as in the
    simulation, because they run the same code under the same seeds.

    Args:
        trainer: a trainer built from the federation's config (its seed, rounds, local epochs/steps and callbacks).
        module: the method's module, as the config builds it.
        datamodule: a federated datamodule that holds this client (only its data is read for training).
        client_id: which client this machine is.

    """

    def __init__(self, trainer: FederatedTrainer, module: LightningModule, datamodule: Any, client_id: str) -> None:
        trainer._launch(module)
        trainer._prepare(module, datamodule, "fit")
        if client_id not in trainer.client_ids:
            raise ValueError(
                f"Flower node: field 'client-id' is {client_id!r}, which the federation's data does not hold"
                f" (its clients: {trainer.client_ids})"
            )
        self.trainer = trainer
        self.client_id = client_id
        # as before a simulated run's first round: callbacks that set up the clients' data (e.g. Global Layers' batch
        # alignment) do it here for this client's data
        trainer._hooks("on_federation_start", trainer=trainer, module=module)

    @property
    def spec(self) -> ClientSpec:
        """The client's description (what the server needs to build its modules)."""
        return self.trainer.datamodule.specs[self.client_id]

    def _receive(
        self, state: ClientState | None, payload: Mapping[str, Tensor], statistics: Mapping[str, Tensor]
    ) -> None:
        trainer = self.trainer
        trainer.server_state = ServerState(statistics=dict(statistics), per_client={self.client_id: dict(payload)})
        trainer._store.clear()
        if state is not None:
            trainer._store[self.client_id] = state

    def fit(
        self,
        round_idx: int,
        payload: Mapping[str, Tensor],
        statistics: Mapping[str, Tensor],
        state: ClientState | None,
    ) -> tuple[ClientUpdate, ClientState, float]:
        """Train the client for one round: ``(upload, its new state, seconds of local work)``.

        Args:
            round_idx: the round.
            payload: the parameters the server sends this client.
            statistics: the statistics the server broadcasts.
            state: the client's state after its previous round (``None``: first round; the engine initialises its
                personal layers from ``(seed, client)`` as in the simulation).

        """
        started = time.perf_counter()
        self._receive(state, payload, statistics)
        update, new_state, _ = self.trainer._fit_client(self.client_id, round_idx)
        return update, new_state, time.perf_counter() - started

    def evaluate(
        self,
        stage: str,
        round_idx: int,
        payload: Mapping[str, Tensor],
        statistics: Mapping[str, Tensor],
        state: ClientState | None,
    ) -> tuple[tuple[dict[str, float], int, dict[str, bool]] | None, ClientState]:
        """Evaluate the client's personalised model on its ``stage`` split.

        Returns:
            ``((metrics, samples, directions) or None when the client has no such split, its state)``; the state is
            the one given, or the client's first-round initialisation.

        """
        self._receive(state, payload, statistics)
        result = self.trainer._evaluate_client(self.client_id, stage, round_idx)
        kept = self.trainer._store[self.client_id]
        return (None if result is None else result[1:]), kept


class RemoteFederation:
    """The server's view of a federation whose data stay on the clients: their descriptions, in client-id order.

    It stands in for a federated datamodule in :class:`RemoteTrainer` (clients are ordered by id, as the shipped
    federations name them, so sampling draws the same clients as in the simulation).

    Args:
        specs: each client's description, as its node reported it.

    """

    def __init__(self, specs: Mapping[str, ClientSpec]) -> None:
        self._specs = {cid: specs[cid] for cid in sorted(specs)}

    def setup(self, stage: str | None = None) -> None:
        """Nothing to load: the data are on the clients."""

    @property
    def client_ids(self) -> list[str]:
        """The clients, sorted by id."""
        return list(self._specs)

    @property
    def specs(self) -> dict[str, ClientSpec]:
        """Each client's description."""
        return dict(self._specs)

    @property
    def declared_num_clients(self) -> int:
        """The number of clients."""
        return len(self._specs)

    def client(self, client_id: str) -> RemoteClient:
        """The server's handle of a client: its description, no data."""
        return RemoteClient(self._specs[client_id])


class RemoteClient:
    """A client as the server sees it: its description only (settings a callback writes on it are kept, unused).

    Args:
        spec: the client's description.

    """

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec


class RemoteTrainer(FederatedTrainer):
    """A :class:`~fedhet.plugins.FederatedTrainer` whose clients train and evaluate elsewhere.

    The round is the engine's own (sampling, aggregation by parameter name, the method's server-side callbacks,
    privacy, fault handling, evaluation summaries, logging, checkpoints of the server state); only each client's
    local work goes through :attr:`remote`, a function that sends the round's requests and returns the clients'
    replies. A client that answers with an error, or not in time, is left out of the round and counted in
    ``clients/failed``, as a client that raises in the simulation. The checkpoint holds no client's personal state:
    it stays on the clients.
    """

    #: ``remote(kind, round_idx, requests) -> replies``: ``kind`` is ``"train"`` or ``"val"``/``"test"``, ``requests``
    #: maps each client to ``(payload, statistics)``; each reply is ``(ClientUpdate, seconds)`` for training,
    #: ``(metrics, samples, directions)`` or ``None`` for evaluation, or an ``Exception`` naming what went wrong.
    remote: Callable[[str, int, dict[str, tuple[dict[str, Tensor], dict[str, Tensor]]]], Replies]

    def payload_for(self, client_id: str) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """What the server sends ``client_id``: its parameters (shared, then personalised) and the statistics."""
        return self.server_state.payload_for(client_id, self._slot(client_id).shared), self.server_state.statistics

    def _fit_one_by_one(self, client_ids: list[str], round_idx: int) -> RoundUploads:
        requests = {cid: self.payload_for(cid) for cid in client_ids}
        replies = self.remote("train", round_idx, requests)
        uploads = RoundUploads()
        for cid in client_ids:
            reply = replies[cid]
            if isinstance(reply, Exception):
                uploads.failures.append(ClientFailure.from_error(cid, reply))
                continue
            update, seconds = reply
            payload, statistics = requests[cid]
            self._admit(update, ClientState({}), num_bytes(payload) + num_bytes(statistics), seconds, uploads)
        return uploads

    def _evaluate(self, stage: str, round_idx: int) -> dict[str, float]:
        requests = {cid: self.payload_for(cid) for cid in self._client_ids}
        self._evaluations = self.remote(stage, round_idx, requests)
        return super()._evaluate(stage, round_idx)

    def _evaluate_client(
        self, cid: str, stage: str, round_idx: int
    ) -> tuple[str, dict[str, float], int, dict[str, bool]] | None:
        reply = self._evaluations[cid]
        if isinstance(reply, Exception):
            raise reply
        return None if reply is None else (cid, *reply)
