"""One LightningModule per method and baseline, each usable alone under a plain ``lightning.Trainer``."""

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.modules.base import FederatedModule
    from fedhet.modules.baselines import FedAvg, FedBABU, FedPer, FedProx, FedRep, LocalOnly
    from fedhet.modules.classifier import FederatedClassifier
    from fedhet.modules.feddadil import FedDaDiL
    from fedhet.modules.fedhenn import FedHeNN
    from fedhet.modules.fedpac import FedPAC
    from fedhet.modules.flic import FLIC, HetFedRep, HetLocal
    from fedhet.modules.global_layers import GlobalLayers
    from fedhet.modules.hyfem import HybridLocal, HyFEM
    from fedhet.modules.hyfem_nets import HybridBody
    from fedhet.modules.image_cnns import FedPACNet

__all__ = [
    "FLIC",
    "FedAvg",
    "FedBABU",
    "FedDaDiL",
    "FedHeNN",
    "FedPAC",
    "FedPACNet",
    "FedPer",
    "FedProx",
    "FedRep",
    "FederatedClassifier",
    "FederatedModule",
    "GlobalLayers",
    "HetFedRep",
    "HetLocal",
    "HyFEM",
    "HybridBody",
    "HybridLocal",
    "LocalOnly",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
