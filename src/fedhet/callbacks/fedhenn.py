r"""FedHeNN's server step: its wire names, its upload declaration and the kernel sync.

FLIC's representation-alignment baseline (Rakotomamonjy et al., TMLR 2024, section 6, adapting Makhija et al.,
"Architecture Agnostic Federated Learning for Neural Networks", ICML 2022): a client (:class:`~fedhet.modules.FedHeNN`)
uploads the kernel :math:`K_i = A_i A_i^\top` of its representations of the random alignment data, as
:func:`fedhenn_upload` declares; the server's one callback, :class:`KernelSync`, broadcasts their mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from fedhet.callbacks.base import FederatedCallback
from fedhet.core import ClientUpdate, Federation, ServerAccess, ServerState, TensorSpec, UploadDeclaration

KERNEL = "fedhenn/kernel"
"""Uploaded: the client's representation kernel :math:`K_i`, ``(rad_size, rad_size)``."""
GLOBAL_KERNEL = "fedhenn/global_kernel"
"""Broadcast: the mean kernel :math:`K`, ``(rad_size, rad_size)``."""


def fedhenn_upload(
    rad_size: int, dtype: torch.dtype = torch.float32, metrics: frozenset[str] = frozenset({"train/loss"})
) -> UploadDeclaration:
    """What a FedHeNN client uploads: its kernel ``(rad_size, rad_size)`` in ``dtype``, and its training ``metrics``.

    Example:
        >>> fedhenn_upload(4).statistics
        {'fedhenn/kernel': TensorSpec(shape=(4, 4), dtype=torch.float32)}

    """
    return UploadDeclaration({KERNEL: TensorSpec((rad_size, rad_size), dtype)}, metrics)


class KernelSync(FederatedCallback):
    r"""Keeps every client's latest kernel :math:`K_i` on the random alignment data and broadcasts their mean :math:`K`.

    The FedHeNN baseline of FLIC (Rakotomamonjy et al., TMLR 2024, section 6) averages the kernels of all clients; a
    client that has not taken part yet has no kernel, so :math:`K` is the mean over the clients seen so far (each with
    the kernel of its latest participation). Reads the uploads' :data:`KERNEL`, writes :data:`GLOBAL_KERNEL`.
    """

    server_access = ServerAccess(writes=(GLOBAL_KERNEL,))

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
