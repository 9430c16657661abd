"""What a module would hold, found without allocating it: the build runs with PyTorch's ``meta`` device as default.

A client description or a checkpoint's hyperparameters from outside the process size a module's layers: building the
module for real first would let them allocate any amount of memory. Built under ``torch.device("meta")``, every
parameter and buffer gets its name, shape and dtype and no storage, so the sizes can be checked before anything real
is built (a module that loads real tensors while it builds, e.g. a pretrained encoder, still reads those).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from fedhet.core import ClientSpec, EngineModule

_Built = TypeVar("_Built")


def client_module(template: EngineModule, spec: ClientSpec) -> EngineModule:
    """A copy of ``template`` with its layers built for the client described by ``spec`` (on the default device)."""
    module = copy.deepcopy(template)
    module.setup_client(spec)
    module.configure_model()
    return module


def on_meta(build: Callable[[], _Built]) -> _Built:
    """``build()`` with PyTorch's default device set to ``meta``: the tensors it creates hold shapes, not memory.

    Example:
        >>> layer = on_meta(lambda: torch.nn.Linear(60_000, 60_000))
        >>> layer.weight.device.type, state_bytes(layer)
        ('meta', 14400240000)

    """
    with torch.device("meta"):
        return build()


def state_bytes(module: nn.Module) -> int:
    """Bytes the parameters and buffers of ``module`` take (or would take, for a module built :func:`on_meta`)."""
    return sum(tensor.numel() * tensor.element_size() for tensor in module.state_dict().values())
