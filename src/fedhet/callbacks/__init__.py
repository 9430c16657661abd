"""Federation callbacks: thin adapters from the engine's round hooks to the maths in ``fedhet.functional``."""

from fedhet.callbacks.anchor_update import AnchorUpdate
from fedhet.callbacks.base import FederatedCallback
from fedhet.callbacks.batch_alignment import BatchAlignment
from fedhet.callbacks.centroid_sync import CentroidSync
from fedhet.callbacks.dashboard import FederationDashboard
from fedhet.callbacks.dictionary_averaging import DictionaryAveraging
from fedhet.callbacks.head_mixing import HeadMixing
from fedhet.callbacks.kernel_sync import KernelSync
from fedhet.callbacks.model_matching import ModelMatching
from fedhet.callbacks.progress import RichRoundProgress

__all__ = [
    "AnchorUpdate",
    "BatchAlignment",
    "CentroidSync",
    "DictionaryAveraging",
    "FederatedCallback",
    "FederationDashboard",
    "HeadMixing",
    "KernelSync",
    "ModelMatching",
    "RichRoundProgress",
]
