"""KernelSync: FedHeNN's server step, the mean of the clients' latest representation kernels, broadcast."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientUpdate, Federation, ServerState
from fedhet.core.statistics import GLOBAL_KERNEL, KERNEL


class KernelSync(FederatedCallback):
    r"""Keeps every client's latest kernel :math:`K_i` on the random alignment data and broadcasts their mean :math:`K`.

    The FedHeNN baseline of FLIC (Rakotomamonjy et al., TMLR 2024, section 6) averages the kernels of all clients; a
    client that has not taken part yet has no kernel, so :math:`K` is the mean over the clients seen so far (each with
    the kernel of its latest participation). Reads the uploads' ``fedhenn/kernel``, writes ``fedhenn/global_kernel``.
    """

    def __init__(self) -> None:
        self.kernels: dict[str, Tensor] = {}

    def on_aggregate_end(
        self, trainer: Federation, round_idx: int, server_state: ServerState, updates: Sequence[ClientUpdate]
    ) -> None:
        """Store the round's kernels and broadcast the mean of all stored ones."""
        for update in updates:
            if KERNEL in update.statistics:
                self.kernels[update.client_id] = update.statistics[KERNEL]
        if self.kernels:
            server_state.statistics[GLOBAL_KERNEL] = torch.stack(list(self.kernels.values())).mean(0)

    def state_dict(self) -> dict[str, Any]:
        """Every client's latest kernel."""
        return {"kernels": dict(self.kernels)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.kernels = dict(state_dict.get("kernels", {}))
