"""The base of federation callbacks: a Lightning ``Callback`` that also answers the engine's round hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning.pytorch import Callback

from fedhet.core.hooks import Federation, FederationHooks

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class FederatedCallback(Callback, FederationHooks):
    """A Lightning callback with the typed federation hooks of :class:`~fedhet.core.hooks.FederationHooks`, all no-ops.

    Being a :class:`lightning.pytorch.Callback` lets a module return it from ``configure_callbacks()`` and still run
    under a plain ``lightning.Trainer``, which ignores the federation hooks. The hooks' ``trainer`` is a
    :class:`~fedhet.core.hooks.Federation` (what a callback may read of :class:`~fedhet.plugins.FederatedTrainer`).
    State that must survive a resume goes in ``state_dict``/``load_state_dict``. A method's server callback may offer
    pictures of its server state (:meth:`figures`), which the dashboard draws.
    """

    def figures(self, trainer: Federation, round_idx: int) -> dict[str, Figure]:
        """The pictures this callback offers of the run after round ``round_idx``, by name; none by default.

        :class:`~fedhet.callbacks.FederationDashboard` saves each as ``plots/<name>.png`` (and sends it to W&B as
        ``figures/<name>``); a method's server callback draws its own (FedPAC's head mixing, FLIC's anchors), with
        the helpers of :mod:`fedhet.callbacks.figures` (matplotlib: ``pip install "fedhet[plot]"``).
        """
        return {}
