"""What travels between clients and server, and what the server keeps for each client."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor


def num_bytes(tensors: Mapping[str, Tensor]) -> int:
    """Bytes of the tensor payload of a name-keyed mapping (names and framing not counted)."""
    return sum(t.nbytes for t in tensors.values())


def to_cpu(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Detached CPU copies that later in-place updates of the originals cannot touch."""
    return {name: t.detach().clone() if t.device.type == "cpu" else t.detach().cpu() for name, t in tensors.items()}


def non_finite(*payloads: Mapping[str, Tensor]) -> list[str]:
    """Names of the floating tensors that hold a NaN or an infinity.

    One reduction and one read per tensor when all are finite (the common case, run for every upload): a NaN or an
    infinity anywhere makes a tensor's sum non-finite. A sum of large finite values may overflow too, so a
    non-finite sum is only a reason to look element-wise.
    """
    floats = {name: t for payload in payloads for name, t in payload.items() if t.is_floating_point()}
    if all(math.isfinite(t.sum().item()) for t in floats.values()):
        return []
    return [name for name, t in floats.items() if not bool(torch.isfinite(t).all())]


@dataclass
class ClientUpdate:
    """One client's upload after local training: exactly what leaves the client.

    Args:
        client_id: the client's name.
        num_samples: its number of training samples (aggregation weight).
        shared: its shared parameters, keyed by name (CPU tensors).
        statistics: the statistics its method declares (centroids, anchors, atoms...), keyed by name.
        metrics: local-training diagnostics (mean loss, steps); scalars that stay in the simulation's logs.

    """

    client_id: str
    num_samples: int
    shared: dict[str, Tensor]
    statistics: dict[str, Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def num_bytes(self) -> int:
        """Bytes sent up: shared parameters plus statistics."""
        return num_bytes(self.shared) + num_bytes(self.statistics)


#: Why a client was left out of a round (:attr:`ClientFailure.kind`).
FailureKind = Literal["error", "non_finite", "straggler", "invalid"]
FAILURE_KINDS: tuple[FailureKind, ...] = ("error", "non_finite", "straggler", "invalid")


class ClientFailure(NamedTuple):
    """A sampled client whose upload was left out of a round's aggregate.

    Args:
        client_id: the client's name.
        kind: ``"error"`` (its training or data loading raised, or its node answered with an error),
            ``"non_finite"`` (NaN/Inf loss or upload), ``"straggler"`` (over the trainer's time budget or a deployed
            round's deadline) or ``"invalid"`` (its upload or reply is not what the server expects: names, shapes,
            dtypes, counts; :mod:`fedhet.core.uploads`).
        reason: a sentence for the log.

    """

    client_id: str
    kind: FailureKind
    reason: str

    @classmethod
    def from_error(cls, client_id: str, err: Exception) -> ClientFailure:
        """The failure of a client whose loading, training or hook raised ``err``."""
        return cls(client_id, "error", f"{type(err).__name__}: {err}")


@dataclass
class RoundUploads:
    """What a process's clients gave in one round: accepted uploads, failed clients, bytes sent to the accepted ones."""

    updates: list[ClientUpdate] = field(default_factory=list)
    failures: list[ClientFailure] = field(default_factory=list)
    bytes_down: int = 0


@dataclass
class ServerState:
    """What the server holds and sends down.

    Args:
        shared: the global shared parameters, keyed by name; a client receives those it holds.
        statistics: global statistics broadcast to every client (e.g. global centroids).
        per_client: personalised payloads, ``client_id -> name -> tensor`` (e.g. FedPAC's mixed heads).

    """

    shared: dict[str, Tensor] = field(default_factory=dict)
    statistics: dict[str, Tensor] = field(default_factory=dict)
    per_client: dict[str, dict[str, Tensor]] = field(default_factory=dict)

    def payload_for(self, client_id: str, shared_names: list[str]) -> dict[str, Tensor]:
        """The parameters client ``client_id`` loads: its shared ones, then its personalised ones."""
        payload = {name: self.shared[name] for name in shared_names if name in self.shared}
        payload.update(self.per_client.get(client_id, {}))
        return payload

    def state_dict(self) -> dict[str, Any]:
        """Plain containers of tensors, loadable with ``torch.load(weights_only=True)``."""
        return {"shared": self.shared, "statistics": self.statistics, "per_client": self.per_client}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.shared = dict(state["shared"])
        self.statistics = dict(state["statistics"])
        self.per_client = {cid: dict(p) for cid, p in state["per_client"].items()}


@dataclass
class ClientState:
    """What stays on a client between its rounds: personal parameters and, if its method keeps it, optimizer state."""

    personal: dict[str, Tensor]
    optimizer: dict[str, Any] | list[dict[str, Any]] | None = None

    def state_dict(self) -> dict[str, Any]:
        """Plain containers for the checkpoint."""
        return {"personal": self.personal, "optimizer": self.optimizer}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ClientState:
        """Rebuild from :meth:`state_dict`."""
        return cls(personal=dict(state["personal"]), optimizer=state.get("optimizer"))
