"""The fedhet engine split in two for Flower: one client's local work on its node, the round loop on the server.

Both sides use the engine's public API only. A node: :meth:`FederatedTrainer.setup
<fedhet.plugins.FederatedTrainer.setup>`, :meth:`~fedhet.plugins.FederatedTrainer.fit_clients` (the trainer's client
runner: the method's phases, seeds from ``(seed, round, client)``, the client hooks, the upload checks) and
:meth:`ClientContext.evaluate <fedhet.plugins.clients.context.ClientContext.evaluate>`. The server: the engine's own
round (sampling, aggregation, server-side callbacks, summaries, logging, checkpoints) with a client runner,
:class:`RemoteRunner`, whose clients are the nodes.
"""

from __future__ import annotations

import logging
import math
import shlex
import time
import warnings
from argparse import ArgumentError
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule
from torch import Tensor

from fedhet.cli import FederatedCLI
from fedhet.cli_text import error_sentence
from fedhet.core import (
    ClientFailure,
    ClientSpec,
    ClientState,
    ClientUpdate,
    InvalidUploadError,
    RoundUploads,
    ServerState,
    num_bytes,
    quoted,
)
from fedhet.plugins import ClientRunner, FederatedTrainer
from fedhet.plugins.clients.context import ClientContext, ClientEvaluation
from fedhet.plugins.hooks.dispatch import CallbackHooks

log = logging.getLogger(__name__)

#: ``(payload, statistics)`` the server sends one client.
Request = tuple[dict[str, Tensor], dict[str, Tensor]]


def load_run(config: str | Path, args: Sequence[str] = ()) -> tuple[FederatedTrainer, LightningModule, Any]:
    """Build trainer, module and federated datamodule from a ``fedhet fit`` config, as the CLI does, without running.

    Args:
        config: the YAML config (the one ``fedhet fit -c`` takes).
        args: further command-line overrides, e.g. ``["--trainer.rounds", "3"]``.

    Raises:
        ValueError: one line naming the config and the option at fault, for a config (or override) the command line
            would refuse; nothing is printed and the process does not exit (it may be a Flower app's).

    """
    with warnings.catch_warnings():  # Lightning would print this process's own argv (e.g. Flower's token) in a warning
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        try:
            cli = FederatedCLI(args=["-c", str(config), *args], run=False, parser_kwargs={"exit_on_error": False})
        except ArgumentError as err:
            raise ValueError(f"config {str(config)!r}: {error_sentence(str(err))}") from None
    return cli.trainer, cli.model, cli.datamodule  # type: ignore[return-value]


def split_args(text: str) -> list[str]:
    """Command-line overrides written as one string (a Flower run-config value), split as a shell would."""
    return shlex.split(text)


class NodeClient:
    """One client of a federation, trained and evaluated by the engine on the client's own machine.

    Nothing outlives a call but what the caller keeps: the client's state comes in and goes out as a
    :class:`~fedhet.core.ClientState` (kept in Flower's ``Context.state``), the server's payload and statistics come
    with the call. A call gives what the simulation computes for the same round and client: it runs the same code
    under the same seeds.

    Args:
        trainer: a trainer built from the federation's config (its seed, rounds, local epochs/steps and callbacks).
        module: the method's module, as the config builds it.
        datamodule: a federated datamodule that holds this client (only its data are read).
        client_id: which client this machine is.

    """

    def __init__(self, trainer: FederatedTrainer, module: LightningModule, datamodule: Any, client_id: str) -> None:
        # a node's client logs and checkpoints nothing (the server does): no run folder is claimed on the node
        self.context: ClientContext = trainer.setup(module, datamodule, "fit", run_folder=False)
        if client_id not in trainer.client_ids:
            raise ValueError(
                f"Flower node: field 'client-id' is {client_id!r}, which the federation's data do not hold"
                f" (its clients: {trainer.client_ids})"
            )
        self.trainer = trainer
        self.client_id = client_id
        # as before a simulated run's first round: callbacks that set up the clients' data (e.g. Global Layers' batch
        # alignment) do it here, for this client's data
        CallbackHooks(trainer.callbacks, trainer=trainer)("on_federation_start", module=module)

    @property
    def spec(self) -> ClientSpec:
        """The client's description (what the server needs to build its modules)."""
        return self.context.specs[self.client_id]

    def _receive(
        self, state: ClientState | None, payload: Mapping[str, Tensor], statistics: Mapping[str, Tensor]
    ) -> None:
        self.trainer.server_state = ServerState(statistics=dict(statistics), per_client={self.client_id: dict(payload)})
        store = self.trainer.store
        store.clear()
        if state is not None:
            store[self.client_id] = state

    def fit(
        self, round_idx: int, payload: Mapping[str, Tensor], statistics: Mapping[str, Tensor], state: ClientState | None
    ) -> tuple[ClientUpdate | ClientFailure, ClientState | None, float]:
        """Train the client for one round.

        Args:
            round_idx: the round.
            payload: the parameters the server sends this client.
            statistics: the statistics the server broadcasts.
            state: the client's state after its previous round (``None``: first round; the engine initialises its
                personal layers as in the simulation).

        Returns:
            ``(upload, new state, seconds of local work)``, or ``(failure, previous state, seconds)`` when the client's
            training raised or its upload failed a check (non-finite, over the time budget).

        """
        started = time.perf_counter()
        self._receive(state, payload, statistics)
        uploads = self.trainer.fit_clients([self.client_id], round_idx)
        seconds = time.perf_counter() - started
        if uploads.failures:
            return uploads.failures[0], state, seconds
        return uploads.updates[0], self.trainer.store[self.client_id], seconds

    def evaluate(
        self,
        stage: str,
        round_idx: int,
        payload: Mapping[str, Tensor],
        statistics: Mapping[str, Tensor],
        state: ClientState | None,
    ) -> tuple[ClientEvaluation | None, ClientState]:
        """Evaluate the client's personalised model on its ``stage`` split.

        Returns:
            ``(evaluation, or None when the client has no such split; its state)``: the state given, or the client's
            first-round initialisation.

        """
        self._receive(state, payload, statistics)
        result = self.context.evaluate(self.client_id, stage, round_idx)
        return (None if result is None else ClientEvaluation(*result)), self.trainer.store[self.client_id]


class RemoteFederation:
    """The server's view of a federation whose data stay on the clients: their descriptions, in client-id order.

    It stands in for a federated datamodule in the server's trainer (clients are ordered by id, as the shipped
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
    """A client as the server sees it: its description only; its data stay on its node.

    Args:
        spec: the client's description.

    """

    def __init__(self, spec: ClientSpec) -> None:
        self._spec = spec

    @property
    def spec(self) -> ClientSpec:
        """The client's description, as its node reported it."""
        return self._spec

    def _no_data(self) -> list[Any]:
        raise RuntimeError(f"client '{self._spec.client_id}': its data stay on its node; the server reads none")

    def train_dataloader(self) -> list[Any]:
        """None on the server: raises."""
        return self._no_data()

    def val_dataloader(self) -> list[Any]:
        """None on the server: raises."""
        return self._no_data()

    def test_dataloader(self) -> list[Any]:
        """None on the server: raises."""
        return self._no_data()


#: ``remote(kind, round_idx, requests) -> replies``: ``kind`` is ``"train"`` or a split (``"val"``, ``"test"``),
#: ``requests`` maps each client to its :data:`Request`; a reply is ``(ClientUpdate, seconds)`` or a
#: :class:`~fedhet.core.ClientFailure` for training, a :class:`~fedhet.plugins.clients.context.ClientEvaluation` or
#: ``None`` (no such split) for evaluation, or an ``Exception`` saying why the node gave no usable answer
#: (:class:`~fedhet.core.InvalidUploadError`: a malformed reply; ``TimeoutError``: none in time). A client missing
#: from the replies gave none. Every reply is untrusted: :class:`RemoteRunner` checks it against what the server
#: expects.
Remote = Callable[[str, int, dict[str, Request]], dict[str, Any]]


def request_for(context: ClientContext, client_id: str) -> Request:
    """What the server sends ``client_id``: its parameters (shared, then personalised) and the statistics."""
    server = context.server_state
    return server.payload_for(client_id, context.slot(client_id).shared), server.statistics


def _no_answer(client_id: str, err: Exception) -> ClientFailure:
    """The failure of a client whose node gave no usable answer."""
    if isinstance(err, InvalidUploadError):
        return ClientFailure(client_id, "invalid", f"reply refused: {err}")
    if isinstance(err, TimeoutError):
        return ClientFailure(client_id, "straggler", f"no reply in time: {err}")
    return ClientFailure.from_error(client_id, err)


def training_reply(client_id: str, reply: object) -> tuple[ClientUpdate, float] | ClientFailure:
    """A node's training reply for ``client_id`` as an upload for the engine's checks, or the client's failure.

    The client is the one whose node was asked: a reply naming another client, or that is not an upload, is refused.
    What the upload holds is then checked by the client context's upload checks, the first of which holds it to the
    client's declaration (:class:`~fedhet.plugins.uploads.policies.DeclaredUpload`, strict for a remote runner: the
    method's shared parameters and declared statistics, names, shapes and dtypes, a sample count within the client's
    declared ``num_train``, only the training metrics the method logs).
    """
    if isinstance(reply, Exception):
        return _no_answer(client_id, reply)
    if isinstance(reply, ClientFailure):
        if reply.client_id != client_id:
            return ClientFailure(
                client_id, "invalid", f"reply refused: its failure names client {quoted(reply.client_id)}"
            )
        return ClientFailure(client_id, reply.kind, f"failed on its node: {reply.reason}")
    if not (isinstance(reply, tuple) and len(reply) == 2 and isinstance(reply[0], ClientUpdate)):
        return ClientFailure(client_id, "invalid", f"reply refused: a {type(reply).__name__}, not an upload")
    update, seconds = reply
    if update.client_id != client_id:
        return ClientFailure(client_id, "invalid", f"reply refused: field 'client_id' is {quoted(update.client_id)}")
    return update, float(seconds)


def metric_range(metric: object) -> tuple[float, float]:
    """The values a ``torchmetrics`` metric can take: its declared bounds, else all reals.

    A metric declares them as ``plot_lower_bound`` and ``plot_upper_bound`` (``MulticlassAccuracy``: ``0.0`` and
    ``1.0``; ``MeanMetric``: none).

    Example:
        >>> from torchmetrics import MeanMetric
        >>> from torchmetrics.classification import MulticlassAccuracy
        >>> metric_range(MulticlassAccuracy(3)), metric_range(MeanMetric())
        ((0.0, 1.0), (-inf, inf))

    """
    low, high = getattr(metric, "plot_lower_bound", None), getattr(metric, "plot_upper_bound", None)
    return (-math.inf if low is None else float(low)), (math.inf if high is None else float(high))


def evaluation_reply(context: ClientContext, client_id: str, stage: str, reply: object) -> ClientEvaluation | None:
    """A node's evaluation of ``client_id`` on its ``stage`` split as the server admits it.

    Its metrics must be the method's evaluation metrics for the client (those the client updated: FedDaDiL's target
    leaves ``source_acc`` out; a node computes its metrics' values anyway), its sample count within the split the
    client's description declares (``None``, no evaluation, only where that split is empty); the metrics' directions
    are the server's.

    Raises:
        InvalidUploadError: naming the field that is not what the server expects.
        Exception: the node's own failure (``reply`` itself).

    """
    if isinstance(reply, Exception):
        raise reply
    spec = context.specs[client_id]
    declared = spec.num_val if stage == "val" else spec.num_test
    if reply is None:
        if declared:
            raise InvalidUploadError(f"no {stage} evaluation, but the client declares {declared} {stage} samples")
        return None
    if not isinstance(reply, ClientEvaluation):
        raise InvalidUploadError(f"a {type(reply).__name__}, not an evaluation")
    metrics = context.slot(client_id).module.evaluation_metrics(stage)
    names = set(metrics.keys())
    if not reply.metrics:
        raise InvalidUploadError("no metric in the evaluation")
    if (
        not set(reply.metrics) <= names
    ):  # a metric the client never updated is left out (fedhet.plugins.clients.local_loop)
        odd = sorted(set(reply.metrics) - names)[0]
        raise InvalidUploadError(f"metric {quoted(odd)} is not one the method computes")
    if isinstance(reply.num_samples, bool) or not isinstance(reply.num_samples, int):
        raise InvalidUploadError(f"field 'num_samples' is a {type(reply.num_samples).__name__}")
    if not 1 <= reply.num_samples <= declared:
        raise InvalidUploadError(f"field 'num_samples' is {reply.num_samples}, expected an integer in [1, {declared}]")
    for name, value in reply.metrics.items():
        low, high = metric_range(metrics[name])
        if not (math.isnan(value) or (math.isfinite(value) and low <= value <= high)):  # NaN: undefined, left out
            raise InvalidUploadError(f"metric {quoted(name)} is {value}, outside its range [{low}, {high}]")
    directions = {name: bool(metric.higher_is_better) for name, metric in metrics.items()}
    return ClientEvaluation(
        {name: float(value) for name, value in reply.metrics.items()}, reply.num_samples, directions
    )


class RemoteRunner(ClientRunner):
    """A client runner whose clients train and evaluate on their own machines, reached through ``remote``.

    Set as a :class:`~fedhet.plugins.FederatedTrainer` 's ``runner`` on the server, it leaves the round to the engine
    (sampling, aggregation by parameter name, the method's server-side callbacks, privacy, the failure budget,
    evaluation summaries, logging, checkpoints of the server state) and sends each round's clients their payloads at
    once. Every reply is untrusted input, checked for each client on its own (:func:`training_reply`,
    :func:`evaluation_reply`): a client whose node fails, answers with an error, not in time, or with anything the
    server does not expect (another client's id, names, shapes or dtypes other than the method's, a sample count
    beyond its declared one, metrics the method does not log) is left out of the round (``clients/failed``) or of the
    evaluation (``clients/<stage>_failed``), named in the log with the field at fault, as a failing client is in the
    simulation; only the failure budget ends the run. Admitted uploads then pass the engine's upload checks. The
    server's checkpoint holds no client's personal state: it stays on the clients.

    Args:
        remote: sends the requests of a round and returns the replies by client (:data:`Remote`).

    Its uploads come from other machines (``remote_uploads``): the engine's declaration check is then strict.

    """

    remote_uploads = True

    def __init__(self, remote: Remote) -> None:
        self.remote = remote

    def run(self, context: ClientContext, client_ids: Sequence[str], round_idx: int) -> RoundUploads:
        """Send the round's clients their payloads and admit their uploads; failed clients are recorded."""
        requests = {cid: request_for(context, cid) for cid in client_ids}
        replies = self.remote("train", round_idx, requests)
        uploads = RoundUploads()
        for cid in client_ids:
            try:
                admitted = training_reply(cid, replies.get(cid, TimeoutError("no reply")))
            except Exception as err:  # whatever a node sent, it must not take the server down
                admitted = ClientFailure(cid, "invalid", f"reply refused: {type(err).__name__}: {str(err)[:500]}")
            if isinstance(admitted, ClientFailure):
                uploads.failures.append(admitted)
                continue
            update, seconds = admitted
            payload, statistics = requests[cid]
            context.admit(update, ClientState({}), num_bytes(payload) + num_bytes(statistics), seconds, uploads)
        return uploads

    def evaluate(
        self, context: ClientContext, client_ids: Sequence[str], stage: str, round_idx: int
    ) -> tuple[dict[str, ClientEvaluation], list[str]]:
        """Ask every client for its evaluation on its ``stage`` split at once; the failed ones are named."""
        replies = self.remote(stage, round_idx, {cid: request_for(context, cid) for cid in client_ids})
        evaluations: dict[str, ClientEvaluation] = {}
        failed: list[str] = []
        for cid in client_ids:
            try:
                evaluation = evaluation_reply(context, cid, stage, replies.get(cid, TimeoutError("no reply")))
            except Exception as err:  # whatever a node sent, it must not take the server down
                reason = _no_answer(cid, err).reason
                log.warning("round %d: client '%s' left out of the %s evaluation: %s", round_idx, cid, stage, reason)
                failed.append(cid)
                continue
            if evaluation is not None:
                evaluations[cid] = evaluation
        return evaluations, failed
