"""Client-parallel execution: which process trains which client, and gathering what they produce."""

from __future__ import annotations

from typing import Any, TypeVar

import torch.distributed as dist
from lightning.fabric import Fabric

T = TypeVar("T")


def owner_rank(client_index: int, world_size: int) -> int:
    """The process that trains and keeps the state of the ``client_index``-th client (round-robin)."""
    return client_index % world_size


def gather_objects(fabric: Fabric, obj: T) -> list[T]:
    """Every process's ``obj``, in rank order, on every process (a pickle all-gather; identity on one process)."""
    if fabric.world_size == 1:
        return [obj]
    gathered: list[Any] = [None] * fabric.world_size
    dist.all_gather_object(gathered, obj)
    return gathered
