"""The shared vocabulary of fedhet: types that the engine, the methods, the data and the callbacks all speak.

This package imports nothing else of fedhet (only torch), so every other package may import it: ``plugins``,
``modules``, ``datamodules`` and ``callbacks`` meet here instead of importing each other.

* :class:`ClientSpec` — what a module may know about a client before training (``spec``).
* :class:`LocalPhase`, :class:`FederatedModuleProtocol` — the module contract the engine drives (``protocols``).
* :class:`ClientUpdate`, :class:`ClientState`, :class:`ServerState`, :class:`ClientFailure`, :class:`RoundUploads`
  — what travels between clients and server and what each keeps (``state``).
* statistic names that a method's module uploads and its server callback reads (``statistics``).
"""

from fedhet.core.protocols import FederatedModuleProtocol, LocalPhase
from fedhet.core.spec import ClientSpec
from fedhet.core.state import (
    ClientFailure,
    ClientState,
    ClientUpdate,
    RoundUploads,
    ServerState,
    non_finite,
    num_bytes,
    to_cpu,
)

__all__ = [
    "ClientFailure",
    "ClientSpec",
    "ClientState",
    "ClientUpdate",
    "FederatedModuleProtocol",
    "LocalPhase",
    "RoundUploads",
    "ServerState",
    "non_finite",
    "num_bytes",
    "to_cpu",
]
