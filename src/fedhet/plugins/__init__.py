"""The Fabric-driven federation engine: round loop, sampling, aggregation, client state, checkpoints, upload privacy."""

from fedhet.core import ClientState, ClientUpdate, FederatedModuleProtocol, LocalPhase, ServerState
from fedhet.plugins.aggregators import Aggregator, CoordinateMedian, TrimmedMean, WeightedMean
from fedhet.plugins.privacy import UploadPrivacy
from fedhet.plugins.sampling import ClientSampler, FullParticipation, UniformSampler
from fedhet.plugins.trainer import FederatedTrainer

__all__ = [
    "Aggregator",
    "ClientSampler",
    "ClientState",
    "ClientUpdate",
    "CoordinateMedian",
    "FederatedModuleProtocol",
    "FederatedTrainer",
    "FullParticipation",
    "LocalPhase",
    "ServerState",
    "TrimmedMean",
    "UniformSampler",
    "UploadPrivacy",
    "WeightedMean",
]
