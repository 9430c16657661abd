"""fedhet: personalised federated learning across heterogeneous samples, classes and feature spaces.

The subpackages are ``fedhet.plugins`` (the federation engine), ``fedhet.modules`` (one LightningModule per method),
``fedhet.datamodules`` (clients and federations), ``fedhet.callbacks`` and ``fedhet.functional`` (pure maths, which
imports no Lightning; importing it does not load the engine).
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["FederatedTrainer", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "FederatedTrainer":
        from fedhet.plugins.trainer import FederatedTrainer

        return FederatedTrainer
    raise AttributeError(f"module 'fedhet' has no attribute {name!r}")
