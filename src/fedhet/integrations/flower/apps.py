"""A Flower ``ServerApp`` and ``ClientApp`` that run a fedhet federation on Flower's deployment runtime.

Build both from a ``fedhet fit`` config in the Flower App's directory (``examples/flower_app/`` is a complete one):

.. code-block:: python

    from pathlib import Path
    from fedhet.integrations.flower import make_client_app, make_server_app

    server_app = make_server_app(Path(__file__).with_name("federation.yaml"))
    client_app = make_client_app(Path(__file__).with_name("federation.yaml"))

Messages (``group_id`` is the round): ``query`` asks a node for its client's description; ``train`` carries the
round, the client's payload (its shared and personalised parameters) and the broadcast statistics, and is answered by
the client's upload; ``evaluate`` carries the same and is answered by the client's metrics on one split.

Node config (``flower-supernode --node-config``): ``client-id``, a string, names the node's client in the federation
(``partition-id``, set by Flower's simulation runtime, picks the client by position instead: a whole number from 0
to the number of clients - 1; ``client-id`` wins when both are set); ``data-config`` optionally names a YAML file
with the node's own ``data`` section (``class_path``/``init_args`` of a federated datamodule that holds the client),
in place of the config's. A field of the wrong type, out of range or naming a client the data do not hold is refused
with a message naming it (:func:`client_of`). A node's trainer logs, checkpoints and shows nothing
(:data:`CLIENT_ARGS`) and claims no run folder; a process that serves several messages (the warm ClientApp process
of :mod:`~fedhet.integrations.flower.node`) builds the node's client once per run (:func:`cached_node_client`). Run
config (``[tool.flwr.app.config]``, overridden by
``flwr run --run-config``): ``fedhet-args``, ``fedhet fit`` overrides applied on the server and every client alike
(e.g. ``"--trainer.rounds 3"``); ``num-clients``, how many nodes to wait for (0: the config's
``declared_num_clients``); ``wait-s``, how long to wait for them; ``reply-timeout-s``, how long a round waits for
replies (600 s by default; 0: no limit); ``max-message-mb``, the most MiB of tensors a reply may carry (512);
``max-input-features``, ``max-classes``, ``max-samples``, the bounds of a client's description
(:class:`~fedhet.core.SpecLimits`; the first two default to what the config fixes of its data, :func:`server_limits`);
``max-model-mb``, the most MiB one client's module may take on the server (1024). The server seats the nodes' clients
(:mod:`~fedhet.integrations.flower.seating`) and checks every reply (:class:`~.engine.RemoteRunner`); its output
(seating, a line per round, a failure in one line) goes into the run's log that ``flwr run --stream`` shows.

Importing this module (or building an app) loads Flower, torch and :mod:`fedhet.core` only: the engine, Lightning
and the config's method load when a node builds its client (its first message) or the server starts its run.
"""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedhet.core import ClientFailure, EngineModule, InvalidUploadError, SpecLimits

if TYPE_CHECKING:
    from fedhet.integrations.flower.engine import NodeClient, Request
    from fedhet.plugins import FederatedTrainer

log = logging.getLogger(__name__)

#: How long a round waits for its clients' replies by default (run config ``reply-timeout-s``; 0: no deadline).
REPLY_TIMEOUT_S = 600.0
#: The most MiB of tensors a node's reply may carry by default (run config ``max-message-mb``).
MAX_MESSAGE_MB = 512.0

#: Overrides of every client's trainer: it logs, checkpoints and shows nothing (the server does).
CLIENT_ARGS = (
    "--trainer.logger",
    "false",
    "--trainer.reporting.progress_bar",
    "false",
    "--trainer.checkpointing.every",
    "0",
)

#: Overrides of the server's trainer: it reports its progress, a plain line per round when, as under Flower, its
#: output is no terminal (what ``flwr run --stream`` shows).
SERVER_ARGS = ("--trainer.reporting.progress_bar", "true")


def _run_config(context: Context, key: str, default: Any) -> Any:
    return context.run_config.get(key, default)


def _node_field(node: Mapping[str, Any], field: str, kind: type, example: str) -> Any:
    """The node config's ``field`` (``None`` when absent), refused unless it is a ``kind``."""
    value = node.get(field)
    if value is None or (isinstance(value, kind) and not isinstance(value, bool) and value != ""):
        return value
    raise ValueError(
        f"Flower node config: field '{field}' must be a {'string' if kind is str else 'whole number'}"
        f" (e.g. --node-config '{example}'), got {value!r} ({type(value).__name__})"
    )


def client_of(node: Mapping[str, Any], datamodule: Any) -> str:
    """Which client of ``datamodule`` a node is: its ``client-id``, else the client at its ``partition-id``.

    Raises:
        ValueError: neither field is set, one has the wrong type, or ``partition-id`` is out of range (the
            ``client-id`` is checked against the data by :class:`~fedhet.integrations.flower.engine.NodeClient`).

    """
    client_id = _node_field(node, "client-id", str, 'client-id="client_000"')
    position = _node_field(node, "partition-id", int, "partition-id=0")
    if client_id is not None:
        return cast(str, client_id)  # _node_field refused all but a str
    if position is None:
        raise ValueError("Flower node config: set field 'client-id' (or 'partition-id'): which client this node is")
    datamodule.setup("fit")
    client_ids = list(datamodule.client_ids)
    if not 0 <= position < len(client_ids):
        raise ValueError(
            f"Flower node config: field 'partition-id' is {position}, out of range: the federation's data hold"
            f" {len(client_ids)} clients (0 to {len(client_ids) - 1})"
        )
    return cast(str, client_ids[position])


def node_client(config: Path, context: Context) -> NodeClient:
    """The :class:`~fedhet.integrations.flower.engine.NodeClient` of this node's client, built from ``config``.

    Its trainer logs, checkpoints and shows nothing and claims no run folder on the node.

    Raises:
        ValueError: the node config names no client (neither ``client-id`` nor ``partition-id``), a field has the
            wrong type, or names a client the data do not hold.

    """
    from fedhet.integrations.flower.engine import NodeClient, load_run, split_args  # Lightning: when a node builds

    node = context.node_config
    for field, example in (("client-id", 'client-id="client_000"'), ("partition-id", "partition-id=0")):
        _node_field(node, field, str if field == "client-id" else int, example)  # refused before the costly build
    data_config = _node_field(node, "data-config", str, 'data-config="/data/site_a/data.yaml"')
    args = [*split_args(str(_run_config(context, "fedhet-args", ""))), *CLIENT_ARGS]
    if data_config is not None:
        args += ["--data", data_config]
    trainer, module, datamodule = load_run(config, args)
    return NodeClient(trainer, module, datamodule, client_of(node, datamodule))


#: The node clients this process built, newest last: a process that serves several messages (a warm ClientApp
#: process, :mod:`fedhet.integrations.flower.node`) builds each once per run instead of once per message.
_CLIENTS: OrderedDict[Hashable, NodeClient] = OrderedDict()
_KEPT_CLIENTS = 4


def _frozen(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((key, repr(value)) for key, value in config.items()))


def cached_node_client(config: Path, context: Context) -> NodeClient:
    """:func:`node_client`, built once per ``(config, run, node config, run config)`` in this process.

    A built client is reused by the run's later messages (its state still comes with every message, from
    ``Context.state``); the four most recently used are kept.
    """
    key = (str(config.resolve()), context.run_id, _frozen(context.node_config), _frozen(context.run_config))
    client = _CLIENTS.pop(key, None) or node_client(config, context)
    _CLIENTS[key] = client
    while len(_CLIENTS) > _KEPT_CLIENTS:
        _CLIENTS.popitem(last=False)
    return client


def make_client_app(config: str | Path) -> ClientApp:
    """The ``ClientApp`` of a fedhet federation: each node trains and evaluates its own client of ``config``.

    It runs the engine's local loop (the method's phases, seeds from ``(seed, round, client)``, its upload, the
    client-side callback hooks) and keeps the client's personal state in the node's ``Context.state``.

    Args:
        config: the federation's ``fedhet fit`` YAML config.

    """
    config = Path(config)
    app = ClientApp()

    @app.query()
    def describe(msg: Message, context: Context) -> Message:
        from fedhet.integrations.flower import records  # the engine (and Lightning) load with a node's first message

        return Message(records.encode_spec(cached_node_client(config, context).spec), reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        from fedhet.integrations.flower import records

        client = cached_node_client(config, context)
        round_idx, payload, statistics, _ = records.decode_request(msg.content)
        result, state, seconds = client.fit(round_idx, payload, statistics, records.load_client_state(context.state))
        if state is not None:
            records.save_client_state(context.state, state)  # personal layers and optimizer state stay on the node
        if isinstance(result, ClientFailure):
            return Message(records.encode_failure(result), reply_to=msg)
        return Message(records.encode_update(result, seconds), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        from fedhet.integrations.flower import records

        client = cached_node_client(config, context)
        round_idx, payload, statistics, stage = records.decode_request(msg.content)
        result, state = client.evaluate(stage, round_idx, payload, statistics, records.load_client_state(context.state))
        records.save_client_state(context.state, state)
        return Message(records.encode_evaluation(result), reply_to=msg)

    return app


class _Remote:
    """Sends a round's requests to the clients' nodes through the grid and collects their replies, by client.

    Each reply is decoded on its own, inside a guard: a malformed one (:func:`~.records.decode_update` raises) becomes
    that client's :class:`~fedhet.core.InvalidUploadError`, a reply from a node that was not asked is dropped, and a
    node that does not answer by the round's deadline gets a ``TimeoutError``.
    """

    def __init__(self, grid: Grid, nodes: dict[str, int], timeout: float | None, max_bytes: int) -> None:
        self.grid = grid
        self.nodes = nodes
        self.timeout = timeout
        self.max_bytes = max_bytes

    def __call__(self, kind: str, round_idx: int, requests: dict[str, Request]) -> dict[str, Any]:
        from fedhet.integrations.flower import records

        messages = []
        for cid, (payload, statistics) in requests.items():
            content = records.encode_request(round_idx, payload, statistics, "fit" if kind == "train" else kind)
            message_type = "train" if kind == "train" else "evaluate"
            messages.append(Message(content, self.nodes[cid], message_type, group_id=str(round_idx)))
        asked = {self.nodes[cid]: cid for cid in requests}  # the server decides whom a reply is from: the node asked
        replies: dict[str, Any] = {
            cid: TimeoutError(f"no reply within reply-timeout-s={self.timeout}") for cid in requests
        }
        answered: set[str] = set()
        for reply in self.grid.send_and_receive(messages, timeout=self.timeout):
            sender = asked.get(reply.metadata.src_node_id)
            if sender is None or sender in answered:
                log.warning("round %d: dropped a reply from Flower node %s, which was not asked (or answered twice)",
                            round_idx, reply.metadata.src_node_id)  # fmt: skip
                continue
            answered.add(sender)
            replies[sender] = self._decode(kind, reply)
        return replies

    def _decode(self, kind: str, reply: Message) -> Any:
        from fedhet.integrations.flower import records

        try:
            if reply.has_error():
                return RuntimeError(f"the client's node answered with an error: {str(reply.error.reason)[:500]}")
            if kind == "train":
                return records.decode_update(reply.content, self.max_bytes)
            return records.decode_evaluation(reply.content)
        except Exception as err:  # a malformed reply fails its client, never the server
            if isinstance(err, InvalidUploadError):
                return err
            return InvalidUploadError(f"{type(err).__name__}: {str(err)[:500]}")


def _positive(run_config: Mapping[str, Any], key: str, default: float) -> float:
    """A run-config number that must be ``>= 0``, refused in one line naming the key."""
    value = run_config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"Flower run config: field '{key}' must be a number >= 0, got {value!r}")
    return float(value)


def server_limits(run_config: Mapping[str, Any], datamodule: object = None) -> tuple[SpecLimits, int]:
    """What the server admits from a node, from the run config: description limits and a reply's bytes of tensors.

    ``max-input-features`` and ``max-classes`` default to what the server's own config fixes of its data, where it
    fixes them (``datamodule.declared_input_features`` and ``declared_num_classes``), else to :class:`SpecLimits`'s.
    """
    defaults = SpecLimits()
    features = getattr(datamodule, "declared_input_features", None) or defaults.max_features
    classes = getattr(datamodule, "declared_num_classes", None) or defaults.max_classes
    limits = SpecLimits(
        max_features=int(_positive(run_config, "max-input-features", features)),
        max_classes=int(_positive(run_config, "max-classes", classes)),
        max_samples=int(_positive(run_config, "max-samples", defaults.max_samples)),
    )
    return limits, int(_positive(run_config, "max-message-mb", MAX_MESSAGE_MB) * 2**20)


def serve(config: Path, grid: Grid, run_config: Mapping[str, Any]) -> FederatedTrainer:
    """The server's whole run: build the federation from ``config``, seat the nodes' clients, train; the trainer.

    The server's trainer always reports its progress (:data:`SERVER_ARGS`): a line per round on its standard output,
    which ``flwr run --stream`` shows.

    Args:
        config: the federation's ``fedhet fit`` YAML config.
        grid: Flower's grid, through which the server reaches the nodes.
        run_config: the run config (``fedhet-args``, ``num-clients``, ``wait-s``, ``reply-timeout-s``, the limits).

    """
    from fedhet.integrations.flower.engine import RemoteFederation, RemoteRunner, load_run, split_args
    from fedhet.integrations.flower.seating import MAX_MODEL_MB, seat_clients

    args = [*split_args(str(run_config.get("fedhet-args", ""))), *SERVER_ARGS]
    trainer, module, datamodule = load_run(config, args)
    expected = int(_positive(run_config, "num-clients", 0)) or datamodule.declared_num_clients
    if not expected:
        raise ValueError("Flower run config: set 'num-clients' (the config's data do not declare their number)")
    limits, max_bytes = server_limits(run_config, datamodule)
    max_model_bytes = int(_positive(run_config, "max-model-mb", MAX_MODEL_MB) * 2**20)
    wait_s = _positive(run_config, "wait-s", 600)
    nodes, specs = seat_clients(
        grid, cast(EngineModule, module), expected, wait_s, limits, max_model_bytes, trainer.faults.max_client_failures
    )
    timeout = _positive(run_config, "reply-timeout-s", REPLY_TIMEOUT_S) or None
    trainer.runner = RemoteRunner(_Remote(grid, nodes, timeout, max_bytes))
    trainer.fit(module, RemoteFederation(specs))
    return trainer


def make_server_app(config: str | Path) -> ServerApp:
    """The ``ServerApp`` of a fedhet federation: the engine's round over the connected nodes' clients.

    Sampling, aggregation, the method's server-side callbacks, evaluation summaries, logs and checkpoints are the
    engine's, written under the config's ``trainer.default_root_dir`` on the server.

    Args:
        config: the federation's ``fedhet fit`` YAML config.

    """
    config = Path(config)
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        with logs_to_stream():
            try:
                serve(config, grid, context.run_config)
            except Exception as err:
                log.error("fedhet ServerApp failed: %s", one_line(err))
                raise

    return app


def one_line(err: BaseException) -> str:
    """``err`` as one line: its type and the first line of its message, cut to 1,000 characters.

    Example:
        >>> one_line(ValueError("trainer.rounds: expected an int"))
        'ValueError: trainer.rounds: expected an int'

    """
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}"[:1000]


@contextmanager
def logs_to_stream() -> Iterator[None]:
    """While the block runs, fedhet's log lines from ``INFO`` up go to standard error, one line each.

    A Flower ``ServerApp`` process mirrors its standard output and error into the run's log, which ``flwr run
    --stream`` and ``flwr log`` show: the nodes seated or refused, the clients left out of a round, a failure.
    """
    logger = logging.getLogger("fedhet")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s fedhet: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    if level == logging.NOTSET or level > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
