"""One LightningModule per method and baseline, each usable alone under a plain ``lightning.Trainer``."""

from fedhet.modules.base import FederatedModule
from fedhet.modules.baselines import FedAvg, FedRep, LocalOnly
from fedhet.modules.classifier import FederatedClassifier

__all__ = ["FedAvg", "FedRep", "FederatedClassifier", "FederatedModule", "LocalOnly"]
