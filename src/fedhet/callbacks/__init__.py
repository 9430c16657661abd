"""Federation callbacks: thin adapters from the engine's round hooks to the maths in ``fedhet.functional``."""

from fedhet.callbacks.base import FederatedCallback
from fedhet.callbacks.progress import RichRoundProgress

__all__ = ["FederatedCallback", "RichRoundProgress"]
