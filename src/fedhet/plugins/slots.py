"""One module instance per client architecture, reloaded in place for every client that has that architecture."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from fedhet.core import EngineModule


class ModuleSlot:
    """A built module and what the engine needs to swap clients in and out of it quickly.

    Loading a client copies its tensors into the module's own parameters and buffers (``Tensor.copy_``), which is
    several times cheaper than ``load_state_dict`` for small models; the copy targets are re-read from
    ``state_dict()`` after every use, so a module that replaces a tensor object during training stays correct.

    Args:
        module: the built module (layers created, on the run's device).

    """

    def __init__(self, module: EngineModule) -> None:
        self.module = module
        self.shared: list[str] = list(module.shared_state_dict())
        self.refresh()
        shared = set(self.shared)
        self.personal: list[str] = [name for name in self.targets if name not in shared]

    def refresh(self, tensors: Mapping[str, Tensor] | None = None) -> None:
        """Re-read the copy targets (from ``tensors``, a fresh ``state_dict()`` of the module, when given)."""
        self.targets = dict(tensors if tensors is not None else self.module.state_dict())

    @torch.no_grad()
    def load(self, personal: Mapping[str, Tensor], payload: Mapping[str, Tensor]) -> None:
        """Copy a client's personal tensors and the server's payload into the module.

        Raises:
            RuntimeError: (from ``load_state_dict``) naming what is missing or unexpected, when the two do not cover
                the module's state exactly.

        """
        if personal.keys() | payload.keys() != self.targets.keys():
            self.module.load_state_dict({**personal, **payload}, strict=True)  # raises, naming the names at fault
        for state in (personal, payload):  # a personalised payload (e.g. a mixed head) overrides personal tensors
            for name, value in state.items():
                self.targets[name].copy_(value)
