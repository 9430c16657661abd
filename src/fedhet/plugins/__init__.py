"""The Fabric-driven federation engine: round loop, sampling, aggregation, client state, checkpoints, upload privacy."""

from fedhet.core import ClientState, ClientUpdate, FederatedModuleProtocol, LocalPhase, ServerState
from fedhet.plugins.aggregators import Aggregator, WeightedMean
from fedhet.plugins.privacy import UploadPrivacy
from fedhet.plugins.sampling import ClientSampler, FullParticipation, UniformSampler
from fedhet.plugins.trainer import FederatedTrainer

__all__ = [
    "Aggregator",
    "ClientSampler",
    "ClientState",
    "ClientUpdate",
    "FederatedModuleProtocol",
    "FederatedTrainer",
    "FullParticipation",
    "LocalPhase",
    "ServerState",
    "UniformSampler",
    "UploadPrivacy",
    "WeightedMean",
]
