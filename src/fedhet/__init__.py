"""fedhet: personalised federated learning across heterogeneous samples, classes and feature spaces."""

from fedhet.plugins.trainer import FederatedTrainer

__version__ = "0.1.0"

__all__ = ["FederatedTrainer", "__version__"]
