"""fedhet: personalised federated learning across heterogeneous samples, classes and feature spaces.

The subpackages are ``fedhet.plugins`` (the federation engine), ``fedhet.modules`` (one LightningModule per method),
``fedhet.datamodules`` (clients and federations), ``fedhet.callbacks`` and ``fedhet.functional`` (pure maths, which
imports no Lightning; importing it does not load the engine).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
