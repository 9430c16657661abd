"""The shared vocabulary of fedhet: types that the engine, the methods, the data and the callbacks all speak.

This package imports nothing else of fedhet (only torch), so every other package may import it: ``plugins``,
``modules``, ``datamodules`` and ``callbacks`` meet here instead of importing each other. Its names are imported from
their submodules when first read (:func:`fedhet._lazy.lazy_exports`), so ``fedhet.core.provenance`` loads without
torch (a suite's parent process reads run records and never imports it).

* :class:`ClientSpec` — what a module may know about a client before training; :class:`SpecLimits` — the bounds
  :meth:`ClientSpec.parse` holds a description from outside the process to (``spec``).
* :class:`LocalPhase`, :class:`LocalTraining`, :class:`FederatedModuleProtocol` — the module contract the engine
  drives (``protocols``).
* :class:`Stacking`, :class:`StackableModule`, :class:`BatchLossModule`, :class:`PenalisedModule`,
  :class:`RoundAware` — capabilities a module may declare beyond the contract (``capabilities``).
* :class:`ClientUpdate`, :class:`ClientState`, :class:`ServerState`, :class:`ClientFailure`, :class:`RoundUploads`
  — what travels between clients and server and what each keeps (``state``).
* :class:`FederatedData`, :class:`ClientData`, :class:`GlobalData` — what the engine reads of a federation's data
  (``data``).
* :class:`Federation`, :class:`FederationHooks`, :class:`ServerAccess` — the typed hooks, what a callback may read
  of the trainer, and what a server callback declares it reads and writes in the server state (``hooks``).
* :class:`UploadDeclaration`, :class:`TensorSpec`, :class:`ExpectedUpload` — what a method declares it uploads
  and what the server admits from a client (``uploads``).
* :func:`quoted` — an untrusted value quoted in a message, cut to a bounded length (``text``).
* :func:`derive_seed`, :func:`seeded`, :func:`rng_preserved` — every random draw of a run derives from (seed,
  purpose, round, client) (``seeding``).
"""

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.core.capabilities import BatchLossModule, PenalisedModule, RoundAware, StackableModule, Stacking
    from fedhet.core.data import ClientData, FederatedData, GlobalData
    from fedhet.core.hooks import Federation, FederationHooks, ServerAccess
    from fedhet.core.protocols import EngineModule, FederatedModuleProtocol, LocalPhase, LocalTraining
    from fedhet.core.seeding import derive_seed, rng_preserved, seeded
    from fedhet.core.spec import ClientSpec, SpecLimits
    from fedhet.core.state import (
        FAILURE_KINDS,
        ClientFailure,
        ClientState,
        ClientUpdate,
        RoundUploads,
        ServerState,
        non_finite,
        num_bytes,
        to_cpu,
    )
    from fedhet.core.text import QUOTE_CHARS, quoted
    from fedhet.core.uploads import (
        ENGINE_METRICS,
        ExpectedUpload,
        InvalidUploadError,
        TensorSpec,
        UploadDeclaration,
        tensors_mismatch,
    )

__all__ = [
    "ENGINE_METRICS",
    "FAILURE_KINDS",
    "QUOTE_CHARS",
    "BatchLossModule",
    "ClientData",
    "ClientFailure",
    "ClientSpec",
    "ClientState",
    "ClientUpdate",
    "EngineModule",
    "ExpectedUpload",
    "FederatedData",
    "Federation",
    "FederationHooks",
    "GlobalData",
    "FederatedModuleProtocol",
    "InvalidUploadError",
    "LocalPhase",
    "LocalTraining",
    "PenalisedModule",
    "RoundAware",
    "RoundUploads",
    "ServerAccess",
    "ServerState",
    "SpecLimits",
    "StackableModule",
    "Stacking",
    "TensorSpec",
    "UploadDeclaration",
    "derive_seed",
    "non_finite",
    "num_bytes",
    "quoted",
    "rng_preserved",
    "seeded",
    "tensors_mismatch",
    "to_cpu",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
