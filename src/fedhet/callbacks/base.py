"""The base of federation callbacks: a Lightning ``Callback`` that also answers the engine's round hooks."""

from __future__ import annotations

from lightning.pytorch import Callback

from fedhet.core.hooks import FederationHooks


class FederatedCallback(Callback, FederationHooks):
    """A Lightning callback with the typed federation hooks of :class:`~fedhet.core.hooks.FederationHooks`, all no-ops.

    Being a :class:`lightning.pytorch.Callback` lets a module return it from ``configure_callbacks()`` and still run
    under a plain ``lightning.Trainer``, which ignores the federation hooks. The hooks' ``trainer`` is a
    :class:`~fedhet.core.hooks.Federation` (what a callback may read of :class:`~fedhet.plugins.FederatedTrainer`).
    State that must survive a resume goes in ``state_dict``/``load_state_dict``.
    """
