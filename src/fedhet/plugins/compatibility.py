"""Whether a checkpoint's tensors fit a module: one clear message instead of a shape error per client."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor


def state_mismatch(expected: Mapping[str, Tensor], saved: Mapping[str, Tensor], limit: int = 3) -> list[str]:
    """What keeps ``saved`` tensors from loading into a module whose state is ``expected``.

    Args:
        expected: the module's tensors by name (``state_dict()`` or a part of it).
        saved: the checkpoint's tensors for the same names.
        limit: report at most this many differences (and how many more there are).

    Returns:
        human-readable differences (names missing from the checkpoint, names the module lacks, shapes that differ);
        empty when every tensor fits.

    Example:
        >>> import torch
        >>> state_mismatch({"w": torch.zeros(2, 3)}, {"w": torch.zeros(4, 3), "b": torch.zeros(4)})
        ["'w' has shape (4, 3) in the checkpoint, (2, 3) in the module", "'b' is in the checkpoint, not in the module"]

    """
    found = [
        f"{name!r} has shape {tuple(saved[name].shape)} in the checkpoint, {tuple(value.shape)} in the module"
        for name, value in expected.items()
        if name in saved and tuple(saved[name].shape) != tuple(value.shape)
    ]
    found += [f"{name!r} is missing from the checkpoint" for name in expected if name not in saved]
    found += [f"{name!r} is in the checkpoint, not in the module" for name in saved if name not in expected]
    if len(found) > limit:
        found = [*found[:limit], f"{len(found) - limit} more"]
    return found
