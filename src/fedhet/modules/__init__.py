"""One LightningModule per method and baseline, each usable alone under a plain ``lightning.Trainer``."""

from fedhet.modules.base import FederatedModule
from fedhet.modules.baselines import FedAvg, FedBABU, FedPer, FedRep, LocalOnly
from fedhet.modules.classifier import FederatedClassifier
from fedhet.modules.feddadil import FedDaDiL
from fedhet.modules.fedpac import FedPAC
from fedhet.modules.fedpac_nets import FedPACNet
from fedhet.modules.global_layers import GlobalLayers

__all__ = [
    "FedAvg",
    "FedBABU",
    "FedDaDiL",
    "FedPAC",
    "FedPACNet",
    "FedPer",
    "FedRep",
    "FederatedClassifier",
    "FederatedModule",
    "GlobalLayers",
    "LocalOnly",
]
