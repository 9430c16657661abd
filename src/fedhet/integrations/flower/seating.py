"""Seating a deployed federation's clients: each node's description checked on its own, then against the others'.

Before round 0 the server asks every connected node for its client's description (:func:`describe_nodes`), each
checked field by field within the server's limits (:func:`~.records.decode_spec`). The seated clients must then form
one federation (:func:`disagreeing`): one ``num_classes``, and one shape for every shared parameter that several
clients hold, the shapes derived from each description by building the client's module on PyTorch's ``meta`` device
(:func:`shared_shapes`: shapes and dtypes, no memory), its size bounded before the server builds anything real. A node
whose description is refused, whose shapes disagree with those most clients give, or that claims a client another
node claims too, loses its seat, named in the log; the run starts with the rest when the failure budget
(``trainer.faults.max_client_failures``) allows it (:func:`seat_clients`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Hashable, Mapping
from typing import cast

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from torch import nn

from fedhet.core import ClientSpec, EngineModule, InvalidUploadError, SpecLimits, quoted
from fedhet.integrations.flower.records import decode_spec
from fedhet.plugins.clients.meta_build import client_module, on_meta, state_bytes

log = logging.getLogger(__name__)


class SeatingError(RuntimeError):
    """Too few of the nodes that answered keep a seat for the run to start: the message names each refused node."""


class _Seats:
    """The federation's clients as the nodes describe them: one seat per client, refused nodes named with why."""

    def __init__(self) -> None:
        self.nodes: dict[str, int] = {}
        self.specs: dict[str, ClientSpec] = {}
        self.refused: dict[int, str] = {}
        self.contested: set[str] = set()

    def asked(self) -> set[int]:
        """The nodes already seated or refused."""
        return set(self.nodes.values()) | set(self.refused)

    def refuse(self, node: int, why: str) -> None:
        """Give ``node`` no seat, and say why in the log."""
        self.refused[node] = why
        log.warning("Flower node %s refused: %s", node, why)

    def unseat(self, client_id: str, why: str) -> None:
        """Take ``client_id``'s seat from its node, and say why in the log."""
        self.specs.pop(client_id)
        self.refuse(self.nodes.pop(client_id), f"client '{client_id}': {why}")

    def seat(self, node: int, spec: ClientSpec) -> None:
        """Give ``node`` its client's seat, unless another node claims that client: then neither keeps it."""
        cid = spec.client_id
        if cid in self.nodes or cid in self.contested:
            self.contested.add(cid)
            self.specs.pop(cid, None)
            other = self.nodes.pop(cid, None)
            for claimant in (other, node):
                if claimant is not None:
                    self.refuse(claimant, f"claims client {quoted(cid)}, as another node does: neither takes part")
            return
        self.nodes[cid], self.specs[cid] = node, spec


def describe_nodes(grid: Grid, expected: int, wait_s: float, limits: SpecLimits | None = None) -> _Seats:
    """Ask the connected nodes for their clients' descriptions until ``expected`` nodes have answered.

    Each description is checked field by field (:func:`~.records.decode_spec`, within ``limits``). A node whose
    description is refused, or that does not answer, is named in the log and takes no seat; two nodes that claim one
    client both lose it (neither can be told to be the real one). Nodes that connect later are asked in turn.

    Raises:
        TimeoutError: fewer than ``expected`` nodes answered within ``wait_s`` seconds, naming the refused ones.

    """
    deadline = time.monotonic() + wait_s
    seats = _Seats()
    log.info("waiting for %d Flower nodes", expected)
    while len(seats.asked()) < expected:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reasons = "; ".join(f"node {node}: {why}" for node, why in seats.refused.items()) or "none refused"
            count = len(seats.asked())
            raise TimeoutError(f"{count} of {expected} Flower nodes answered within wait-s={wait_s} ({reasons})")
        new = [node for node in grid.get_node_ids() if node not in seats.asked()]
        if not new:
            time.sleep(min(0.5, remaining))
            continue
        queries = [Message(RecordDict(), node, "query", group_id="describe") for node in new]
        answered = set()
        for reply in grid.send_and_receive(queries, timeout=max(remaining, 1.0)):
            node = reply.metadata.src_node_id
            if node not in new or node in answered:
                continue
            answered.add(node)
            try:
                if reply.has_error():
                    raise InvalidUploadError(f"it answered with an error: {str(reply.error.reason)[:500]}")
                spec = decode_spec(reply.content, f"Flower node {node}", limits)
            except Exception as err:  # a node's description is untrusted: it costs that node its seat, nothing more
                seats.refuse(node, str(err))
                continue
            seats.seat(node, spec)
        for node in set(new) - answered:
            seats.refuse(node, "no description in time")
    return seats


#: The most MiB of parameters and buffers the server builds for one client's module by default (``max-model-mb``).
MAX_MODEL_MB = 1024.0


def shared_shapes(template: EngineModule, spec: ClientSpec, max_bytes: int) -> dict[str, tuple[int, ...]]:
    """The shapes of the shared parameters of ``template`` built for ``spec``, found on the ``meta`` device.

    Nothing is allocated: the build creates shapes and dtypes only (:func:`~fedhet.plugins.clients.meta_build.on_meta`).

    Raises:
        InvalidUploadError: the client's module would take more than ``max_bytes`` bytes.

    """
    module = on_meta(lambda: client_module(template, spec))
    size = state_bytes(cast(nn.Module, module))  # an EngineModule is a LightningModule
    if size > max_bytes:
        raise InvalidUploadError(
            f"its module would take {size / 2**20:.0f} MiB, over the limit of {max_bytes / 2**20:.0f} MiB"
            " (max-model-mb)"
        )
    return {name: tuple(value.shape) for name, value in module.shared_state_dict().items()}


def disagreeing(values: Mapping[str, Mapping[str, Hashable]]) -> dict[str, str]:
    """The clients that give a federation-wide key a value other than the one most clients give, and why.

    Args:
        values: by client, each key it holds (a field, a shared parameter, as the message names it) and its value.

    Returns:
        by client, a phrase naming its first key at fault; a key whose most common value is tied with another's
        has no agreed value, and every client holding it is at fault (none can be told to be right).

    Example:
        >>> disagreeing({"a": {"w": (10, 4)}, "b": {"w": (10, 4)}, "c": {"w": (11, 4)}})
        {'c': 'w is (11, 4), where 2 of 3 clients give (10, 4)'}
        >>> disagreeing({"a": {"w": 1}, "b": {"w": 2}})["b"]
        'w is 2, and no value has most clients (1: 1, 2: 1)'

    """
    counts: dict[str, Counter[Hashable]] = {}
    for entries in values.values():
        for key, value in entries.items():
            counts.setdefault(key, Counter())[value] += 1
    why: dict[str, str] = {}
    for client_id, entries in values.items():
        for key, value in entries.items():
            ranked = counts[key].most_common()
            top, most = ranked[0]
            tied = len(ranked) > 1 and ranked[1][1] == most
            if value == top and not tied:
                continue
            if tied:
                shown = ", ".join(f"{v}: {n}" for v, n in ranked)
                why[client_id] = f"{key} is {value}, and no value has most clients ({shown})"
            else:
                why[client_id] = f"{key} is {value}, where {most} of {sum(counts[key].values())} clients give {top}"
            break
    return why


def _unseat_disagreeing(seats: _Seats, template: EngineModule, max_bytes: int) -> None:
    """Unseat the clients whose module is too large, or whose classes or shared shapes disagree with most clients'."""
    values: dict[str, dict[str, Hashable]] = {}
    shapes: dict[Hashable, dict[str, tuple[int, ...]] | str] = {}  # by architecture: shapes, or why none
    for cid, spec in list(seats.specs.items()):
        signature = template.client_signature(spec)
        if signature not in shapes:
            try:
                shapes[signature] = shared_shapes(template, spec, max_bytes)
            except Exception as err:  # a description the module cannot be built for costs its seat, nothing more
                shapes[signature] = f"its module cannot be built: {type(err).__name__}: {str(err)[:500]}"
        built = shapes[signature]
        if isinstance(built, str):
            seats.unseat(cid, built)
            continue
        shared = {f"shared parameter '{name}'": shape for name, shape in built.items()}
        values[cid] = {"field 'num_classes'": spec.num_classes, **shared}
    for cid, why in disagreeing(values).items():
        seats.unseat(cid, f"{why}: a federation's clients must agree")


def seat_clients(
    grid: Grid,
    template: EngineModule,
    expected: int,
    wait_s: float,
    limits: SpecLimits | None = None,
    max_model_bytes: int = int(MAX_MODEL_MB * 2**20),
    max_refused: float = 0.5,
) -> tuple[dict[str, int], dict[str, ClientSpec]]:
    """The federation's clients as the nodes describe them, each checked on its own and against the others.

    Args:
        grid: Flower's grid, through which the server reaches the nodes.
        template: the method's module, as the server's config builds it.
        expected: how many nodes must answer before the check (:func:`describe_nodes`).
        wait_s: how long to wait for them.
        limits: the bounds of a description's sizes and counts.
        max_model_bytes: the most bytes one client's module may take.
        max_refused: the fraction of the nodes that answered which may be refused (the trainer's
            ``faults.max_client_failures``).

    Returns:
        ``({client: node}, {client: description})`` of the seated clients.

    Raises:
        TimeoutError: fewer than ``expected`` nodes answered within ``wait_s``.
        SeatingError: no node keeps its seat, or more than ``max_refused`` of those that answered were refused.

    """
    seats = describe_nodes(grid, expected, wait_s, limits)
    _unseat_disagreeing(seats, template, max_model_bytes)
    answered, refused = len(seats.asked()), len(seats.refused)
    if not seats.specs or refused > max_refused * answered:
        reasons = "; ".join(f"node {node}: {why}" for node, why in seats.refused.items())
        raise SeatingError(
            f"{refused} of {answered} Flower nodes refused, more than max_client_failures={max_refused} allows:"
            f" {reasons}"
        )
    pairs = ", ".join(f"{cid} on node {n}" for cid, n in sorted(seats.nodes.items()))
    log.info("Flower nodes of the federation: %s", pairs)
    return seats.nodes, seats.specs
