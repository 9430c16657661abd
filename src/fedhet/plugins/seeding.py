"""Derivation of independent random seeds from (seed, purpose, round, client)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed that depends only on ``seed`` and ``keys``, never on the process or the order of calls.

    Every random draw of a federated run goes through this, so that the same config gives the same run whatever
    the number of processes and whether or not it was resumed from a checkpoint.

    Example:
        >>> derive_seed(0, "fit", 3, "client_001") == derive_seed(0, "fit", 3, "client_001")
        True
        >>> derive_seed(0, "fit", 3, "client_001") == derive_seed(0, "fit", 4, "client_001")
        False

    """
    text = "/".join(map(str, (seed, *keys))).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


@contextmanager
def seeded(seed: int, devices: list[torch.device] | None = None) -> Iterator[None]:
    """Run a block with torch's global generators seeded, restoring their previous state afterwards."""
    cuda_devices = [d for d in devices or [] if d.type == "cuda"]
    with torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        yield
