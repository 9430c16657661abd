"""The Fabric-driven federation engine, and its public names (each imported from here, its one public path).

Subpackages: ``rounds`` (the round loop: trainer, options, sampling, metrics, new clients), ``clients`` (a client's
context, the runners, the local loop), ``uploads`` (upload checks, aggregation, private updates), ``storage`` (client
states, run folders, checkpoints, export), ``processes`` (client-parallel processes, shared memory), ``hooks`` (callback
dispatch, the server step's guard, the run's callbacks and loggers).
"""

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.plugins.clients.runners import ClientRunner, SequentialRunner
    from fedhet.plugins.clients.stacked import StackedRunner
    from fedhet.plugins.rounds.options import Checkpointing, ClientStates, Faults, Processes, Reporting
    from fedhet.plugins.rounds.sampling import ClientSampler, FullParticipation, NewClients, UniformSampler
    from fedhet.plugins.rounds.trainer import FederatedTrainer
    from fedhet.plugins.uploads.aggregators import Aggregator, CoordinateMedian, TrimmedMean, WeightedMean
    from fedhet.plugins.uploads.policies import (
        FiniteUpload,
        PlainUpdate,
        PrivateUpdate,
        ServerUpdate,
        TimeBudget,
        UploadCheck,
    )
    from fedhet.plugins.uploads.privacy import UploadPrivacy

__all__ = [
    "Aggregator",
    "Checkpointing",
    "ClientRunner",
    "ClientSampler",
    "ClientStates",
    "CoordinateMedian",
    "Faults",
    "FederatedTrainer",
    "FiniteUpload",
    "FullParticipation",
    "NewClients",
    "PlainUpdate",
    "PrivateUpdate",
    "Processes",
    "Reporting",
    "SequentialRunner",
    "ServerUpdate",
    "StackedRunner",
    "TimeBudget",
    "TrimmedMean",
    "UniformSampler",
    "UploadCheck",
    "UploadPrivacy",
    "WeightedMean",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
