"""The typed federation hooks: what the engine calls on a callback, and what a callback may read of the trainer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from torch import nn

from fedhet.core.data import FederatedData
from fedhet.core.state import ClientUpdate, ServerState


@runtime_checkable
class Federation(Protocol):
    """What a callback may read of the running trainer (:class:`~fedhet.plugins.FederatedTrainer` implements it).

    Attributes:
        rounds: the rounds of the run.
        current_round: rounds completed so far.
        local_epochs: the trainer's ``local_epochs``.
        seed: the run's seed; a callback's own draws derive from it (:func:`~fedhet.core.seeding.derive_seed`).
        server_state: what the server holds and sends down; server-side callbacks edit it.
        history: every completed round's metrics.
        fitting: whether ``fit`` is running (``False`` during ``validate``/``test``).

    """

    rounds: int
    current_round: int
    local_epochs: int
    seed: int
    server_state: ServerState
    history: list[dict[str, float]]
    fitting: bool

    @property
    def datamodule(self) -> FederatedData:
        """The federation's data of the run (``client_ids``, ``specs``, ``client(cid)``)."""

    @property
    def loggers(self) -> Sequence[Any]:
        """The run's Lightning/Fabric loggers (empty on processes that do not log)."""

    def log_dict(self, metrics: Mapping[str, float], step: int) -> None:
        """Log ``metrics`` at round ``step`` with the run's loggers (what a server callback reports of its step)."""

    @property
    def client_ids(self) -> list[str]:
        """The federation's clients, in order."""

    @property
    def is_global_zero(self) -> bool:
        """Whether this is the process that logs and writes checkpoints."""

    @property
    def run_dir(self) -> Path:
        """This run's version folder (config, checkpoints, logs, spilled states, plots)."""

    def owns(self, client_id: str) -> bool:
        """Whether this process trains and keeps the state of ``client_id``."""

    def client_module(self, client_id: str) -> nn.Module:
        """A module holding ``client_id``'s trained model (a client this process owns), on the CPU, in eval mode."""


@dataclass(frozen=True, init=False)
class ServerAccess:
    """What a server-side callback reads and writes in the :class:`~fedhet.core.ServerState`, by name.

    A method's server callback declares it as its class attribute ``server_access``; the engine holds the callback to
    it. At setup a callback that ``reads`` a statistic must run after every callback that ``writes`` it, and no two
    callbacks may write the same name (:func:`~fedhet.plugins.hooks.server_step.check_server_order`); in every round a
    callback that changes a broadcast statistic or a per-client payload entry it does not declare stops the run,
    naming itself and the entry (:func:`~fedhet.plugins.hooks.server_step.run_server_hook`). The shared parameters
    belong to the aggregator and are not part of the declaration.

    Args:
        reads: broadcast statistics (keys of ``server_state.statistics``) the callback reads in its server hooks.
        writes: broadcast statistics it adds, replaces, changes in place or removes.
        per_client: the per-client payload entries it writes (``server_state.per_client[client_id][name]``), as
            ``fnmatch`` patterns of ``name`` (like a module's ``shared``): FedPAC's mixed head writes ``head.weight``
            and ``head.bias``, HyFEM's matching ``anchors.*``.

    Example:
        >>> access = ServerAccess(writes=["fedpac/global_centroids"], per_client=["anchors.*"])
        >>> access.may_write("fedpac/global_centroids"), access.may_write_per_client("anchors.head/bias")
        (True, True)
        >>> access.may_write("fedpac/global_counts")
        False

    """

    reads: frozenset[str]
    writes: frozenset[str]
    per_client: frozenset[str]

    def __init__(self, reads: Iterable[str] = (), writes: Iterable[str] = (), per_client: Iterable[str] = ()) -> None:
        object.__setattr__(self, "reads", frozenset(reads))
        object.__setattr__(self, "writes", frozenset(writes))
        object.__setattr__(self, "per_client", frozenset(per_client))

    def may_write(self, key: str) -> bool:
        """Whether the callback declares the broadcast statistic ``key``."""
        return key in self.writes

    def may_write_per_client(self, name: str) -> bool:
        """Whether the callback declares the per-client payload entry ``name`` (some pattern matches it)."""
        return any(fnmatchcase(name, pattern) for pattern in self.per_client)


class FederationHooks:
    """The engine's hooks with their types, all no-ops; a callback overrides those it needs.

    The engine passes each hook only the keyword arguments its signature names (as ``Fabric.call`` does), so an
    override may drop arguments it does not use. Order in a run: ``on_federation_start``; per round
    ``on_round_start``, per client ``on_client_fit_start`` then ``on_client_fit_end`` (see
    :mod:`fedhet.plugins.clients.runners` for the stacked runner's order), ``on_aggregate_start``, ``on_aggregate_end``,
    ``on_evaluation_end`` (rounds that evaluate), ``on_round_end``; ``on_federation_end``.

    A callback whose ``on_aggregate_start``/``on_aggregate_end`` writes into the server state declares what it
    reads and writes there in :attr:`server_access` (nothing by default: such a callback only observes).
    """

    server_access: ClassVar[ServerAccess] = ServerAccess()
    """What the callback's server hooks read and write in the server state (:class:`ServerAccess`)."""

    def on_federation_start(self, trainer: Federation, module: nn.Module) -> None:
        """Called once before the first round (also after a resume)."""

    def on_round_start(self, trainer: Federation, round_idx: int, client_ids: list[str]) -> None:
        """Called when round ``round_idx`` starts, with the sampled clients."""

    def on_client_fit_start(self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module) -> None:
        """Called before a client's local training, with its state and the server payload loaded."""

    def on_client_fit_end(
        self, trainer: Federation, round_idx: int, client_id: str, module: nn.Module, update: ClientUpdate
    ) -> None:
        """Called after a client's local training, with the upload it produced."""

    def on_aggregate_start(self, trainer: Federation, round_idx: int, updates: Sequence[ClientUpdate]) -> None:
        """Called on every process with all uploads of the round, in client order, before aggregation."""

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Called after the shared parameters were aggregated; server-side method steps go here."""

    def on_evaluation_end(self, trainer: Federation, stage: str, round_idx: int, metrics: dict[str, float]) -> None:
        """Called after every client was evaluated, with the summarised metrics."""

    def on_round_end(self, trainer: Federation, round_idx: int, metrics: dict[str, float]) -> None:
        """Called after a round's aggregation, evaluation and logging."""

    def on_federation_end(self, trainer: Federation) -> None:
        """Called once after the last round."""
