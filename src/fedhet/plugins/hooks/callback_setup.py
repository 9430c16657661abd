"""The loggers and callbacks a run starts with: the user's, the module's own, and the engine's display and dashboard."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lightning.fabric.loggers.logger import Logger
from lightning.pytorch import Callback, LightningModule
from lightning.pytorch.loggers import Logger as LightningLogger
from lightning.pytorch.loggers import WandbLogger

from fedhet.callbacks.lightning_adapters import adapt_lightning_callbacks
from fedhet.callbacks.progress import RichRoundProgress
from fedhet.plugins.hooks.server_step import check_server_order

#: What the trainer's ``logger`` takes: a Lightning logger or any Fabric logger. Lightning's logger base comes first so
#: that a config's short class name (``TensorBoardLogger``, ``CSVLogger``), which Fabric's logger of the same name
#: would make ambiguous, resolves to Lightning's (``lightning.pytorch.loggers``, as ``WandbLogger`` does); Fabric's
#: are still accepted by their full path (``lightning.fabric.loggers.TensorBoardLogger``).
TrainerLogger = LightningLogger | Logger


def user_loggers(logger: TrainerLogger | Iterable[TrainerLogger] | bool | None) -> list[Logger]:
    """The loggers a user passed as the trainer's ``logger`` (``True``/``False``: none).

    The run folder's CSV record is not among them: the trainer adds it at launch (unless ``logger=False``), once the
    version folder it writes into is known.
    """
    if isinstance(logger, bool) or logger is None:
        return []
    if isinstance(logger, Logger):
        return [logger]
    return list(logger)


def federation_callbacks(
    user_callbacks: Iterable[Any], model: LightningModule, loggers: Iterable[Logger], progress: bool
) -> list[Any]:
    """The run's callbacks, in calling order.

    The user's callbacks, then the module's ``configure_callbacks()`` in the order the method states there (which win
    over a user callback of the same type); Lightning's ``ModelCheckpoint``/``EarlyStopping`` swapped for their
    round-granular adapters (any other Lightning callback refused,
    :func:`~fedhet.callbacks.lightning_adapters.adapt_lightning_callbacks`); a
    :class:`~fedhet.callbacks.dashboard.FederationDashboard` when a W&B logger is used and none was given; a
    :class:`~fedhet.callbacks.progress.RichRoundProgress` when ``progress`` and none was given. The order is checked
    against the callbacks' declared server-state access (:func:`~fedhet.plugins.hooks.server_step.check_server_order`: a
    callback that reads a server statistic runs after the one that writes it).
    """
    declared = model.configure_callbacks() or []
    declared = [declared] if isinstance(declared, Callback) else list(declared)
    declared_types = {type(cb) for cb in declared}
    callbacks = [cb for cb in user_callbacks if type(cb) not in declared_types] + declared
    callbacks = adapt_lightning_callbacks(callbacks)
    check_server_order(callbacks)
    if any(isinstance(lg, WandbLogger) for lg in loggers):
        from fedhet.callbacks.dashboard import FederationDashboard  # only then: it draws every method's pictures

        if not any(isinstance(cb, FederationDashboard) for cb in callbacks):
            callbacks.append(FederationDashboard())  # tables, histograms, method pictures, checkpoint artifact
    if progress and not any(isinstance(cb, RichRoundProgress) for cb in callbacks):
        callbacks.append(RichRoundProgress())
    return callbacks
