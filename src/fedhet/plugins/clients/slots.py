"""One module instance per client architecture, reloaded in place for every client that has that architecture."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor
from torch.optim import Optimizer

from fedhet.core import EngineModule
from fedhet.plugins.clients.local_loop import local_optimizers


class ModuleSlot:
    """A built module and what the engine needs to swap clients in and out of it quickly.

    Loading a client copies its tensors into the module's own parameters and buffers (``Tensor.copy_``), which is
    several times cheaper than ``load_state_dict`` for small models. The copy targets (:attr:`targets`, the module's
    own tensors by ``state_dict`` name) are read once; :meth:`tensors` checks after every use, by identity, that each
    is still where ``state_dict()`` found it, and re-reads them if a module replaced one during training, so no
    ``state_dict()`` walk is paid per client. (A module's names are fixed once its layers are built: the engine's
    split into shared and personal names assumes it.)

    A module whose ``reuse_optimizers`` is true (its ``configure_optimizers()`` depends only on its hyperparameters
    and parameters, e.g. :class:`~fedhet.modules.FederatedClassifier`) gets its optimizers built once and reset for
    every client (:meth:`optimizers`), instead of a new set per client.

    Args:
        module: the built module (layers created, on the run's device).

    """

    def __init__(self, module: EngineModule) -> None:
        self.module = module
        self.shared: list[str] = list(module.shared_state_dict())
        self._optimizers: list[Optimizer] | None = None
        self._settings: list[list[dict[str, Any]]] = []
        self.refresh()
        shared = set(self.shared)
        self.personal: list[str] = [name for name in self.targets if name not in shared]

    def refresh(self) -> None:
        """Re-read the copy targets from the module's ``state_dict`` (after a failure, or a replaced tensor).

        Reused optimizers are dropped when a parameter they step is no longer the module's.
        """
        self.targets: dict[str, Tensor] = dict(self.module.state_dict(keep_vars=True))
        # detached aliases of the same memory: copying into them needs no autograd switch (no ``torch.no_grad``)
        self._destinations = {name: t.detach() if isinstance(t, Tensor) else t for name, t in self.targets.items()}
        self._homes = _homes(self.module, self.targets)
        if self._optimizers is not None:
            current = {id(param) for _, param in self.module.named_parameters()}
            stepped = (id(p) for opt in self._optimizers for group in opt.param_groups for p in group["params"])
            if not all(pid in current for pid in stepped):
                self._optimizers = None

    def tensors(self) -> dict[str, Tensor]:
        """The module's tensors by ``state_dict`` name: its own parameters and buffers, not copies (do not keep them).

        Re-read (:meth:`refresh`) only when one of them is no longer the tensor the module holds under its name.
        """
        homes = self._homes
        if homes is None or not all(home.get(key) is tensor for home, key, tensor in homes):
            self.refresh()
        return self.targets

    def optimizers(self) -> list[Optimizer]:
        """The module's optimizers, as ``configure_optimizers()`` would build them new for the next client.

        With ``reuse_optimizers`` they are built on first use and then reset: their state cleared (momenta, Adam's
        moments and step counts) and each parameter group's settings (``lr``, ``momentum``...) restored to those it
        was built with, which is what a new optimizer over the same parameters holds. Without it, a new set each call.
        """
        if not self.module.reuse_optimizers:
            return local_optimizers(self.module)
        if self._optimizers is None:
            self._optimizers = local_optimizers(self.module)
            self._settings = [[_settings(group) for group in opt.param_groups] for opt in self._optimizers]
            return self._optimizers
        for optimizer, settings in zip(self._optimizers, self._settings, strict=True):
            optimizer.state.clear()
            for group, built in zip(optimizer.param_groups, settings, strict=True):
                group.update(built)
        return self._optimizers

    def load(self, personal: Mapping[str, Tensor], payload: Mapping[str, Tensor]) -> None:
        """Copy a client's personal tensors and the server's payload into the module.

        Raises:
            RuntimeError: (from ``load_state_dict``) naming what is missing or unexpected, when the two do not cover
                the module's state exactly.

        """
        if personal.keys() | payload.keys() != self.targets.keys():
            self.module.load_state_dict({**personal, **payload}, strict=True)  # raises, naming the names at fault
        destinations = self._destinations
        for state in (personal, payload):  # a personalised payload (e.g. a mixed head) overrides personal tensors
            for name, value in state.items():
                destinations[name].copy_(value)


def _homes(module: EngineModule, targets: Mapping[str, Tensor]) -> list[tuple[dict[str, Any], str, Tensor]] | None:
    """Where each of ``targets`` lives: its layer's ``_parameters`` or ``_buffers`` dict and its key there.

    ``None`` when a name is not a plain parameter or buffer (a state-dict hook or extra state made it): then
    :meth:`ModuleSlot.tensors` re-reads the ``state_dict`` every time.
    """
    homes = []
    for name, tensor in targets.items():
        prefix, _, key = name.rpartition(".")
        try:
            layer = module.get_submodule(prefix)
        except AttributeError:
            return None
        for home in (layer._parameters, layer._buffers):
            if home.get(key) is tensor:
                homes.append((home, key, tensor))
                break
        else:
            return None
    return homes


def _settings(group: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter group's settings: everything but its parameters."""
    return {key: value for key, value in group.items() if key != "params"}
