"""The Fabric-driven federation engine: round loop, sampling, aggregation, client state, checkpoints, upload privacy."""

from fedhet.core import ClientState, ClientUpdate, FederatedModuleProtocol, LocalPhase, ServerState
from fedhet.plugins.aggregators import Aggregator, CoordinateMedian, TrimmedMean, WeightedMean
from fedhet.plugins.options import Checkpointing, ClientStates, Faults, Processes, Reporting
from fedhet.plugins.policies import FiniteUpload, PlainUpdate, PrivateUpdate, ServerUpdate, TimeBudget, UploadCheck
from fedhet.plugins.privacy import UploadPrivacy
from fedhet.plugins.runners import ClientRunner, SequentialRunner
from fedhet.plugins.sampling import ClientSampler, FullParticipation, NewClients, UniformSampler
from fedhet.plugins.stacked import StackedRunner
from fedhet.plugins.trainer import FederatedTrainer

__all__ = [
    "Aggregator",
    "Checkpointing",
    "ClientRunner",
    "ClientSampler",
    "ClientState",
    "ClientStates",
    "ClientUpdate",
    "CoordinateMedian",
    "Faults",
    "FederatedModuleProtocol",
    "FederatedTrainer",
    "FiniteUpload",
    "FullParticipation",
    "LocalPhase",
    "NewClients",
    "PlainUpdate",
    "PrivateUpdate",
    "Processes",
    "Reporting",
    "SequentialRunner",
    "ServerState",
    "ServerUpdate",
    "StackedRunner",
    "TimeBudget",
    "TrimmedMean",
    "UniformSampler",
    "UploadCheck",
    "UploadPrivacy",
    "WeightedMean",
]
