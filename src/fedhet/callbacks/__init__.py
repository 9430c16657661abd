"""Federation callbacks: each method's server step with its wire names, and the run's observers.

One file per method's server work, owning that method's wire names and upload declaration: :mod:`~.flic`
(:class:`AnchorUpdate`), :mod:`~.fedpac` (:class:`CentroidSync` then :class:`HeadMixing`), :mod:`~.hyfem`
(:class:`ModelMatching`), :mod:`~.feddadil` (:class:`DictionaryAveraging`), :mod:`~.fedhenn` (:class:`KernelSync`);
observers beside them (progress, dashboard, Lightning adapters; the tuner's pruning callback lives with the tuner,
:class:`fedhet.experiments.pruning.OptunaPruning`). Each is a thin adapter from the engine's round hooks to the maths
in ``fedhet.functional``.
"""

from typing import TYPE_CHECKING

from fedhet._lazy import lazy_exports

if TYPE_CHECKING:
    from fedhet.callbacks.base import FederatedCallback
    from fedhet.callbacks.dashboard import FederationDashboard
    from fedhet.callbacks.feddadil import DictionaryAveraging
    from fedhet.callbacks.fedhenn import KernelSync
    from fedhet.callbacks.fedpac import CentroidSync, HeadMixing
    from fedhet.callbacks.flic import AnchorUpdate
    from fedhet.callbacks.hyfem import ModelMatching
    from fedhet.callbacks.progress import RichRoundProgress

__all__ = [
    "AnchorUpdate",
    "CentroidSync",
    "DictionaryAveraging",
    "FederatedCallback",
    "FederationDashboard",
    "HeadMixing",
    "KernelSync",
    "ModelMatching",
    "RichRoundProgress",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
