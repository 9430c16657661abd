"""Derivation of independent random seeds from (seed, purpose, round, client)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

import torch
from torch import Tensor


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


_PRESERVED: ContextVar[bool] = ContextVar("fedhet_rng_preserved", default=False)


@contextmanager
def rng_preserved(devices: list[torch.device] | None = None) -> Iterator[None]:
    """Run a block that seeds torch's generators many times (:func:`seeded`), restoring them once, after it.

    Inside it, :func:`seeded` only seeds: the state is saved and restored here, once, instead of at every
    :func:`seeded` (a save and a restore cost more than a client's seeding; the engine seeds every client of a round).

    Args:
        devices: the devices whose generators the block's :func:`seeded` calls seed: every CUDA one among them is
            saved and restored, as the CPU generator always is.

    """
    if _PRESERVED.get():
        yield
        return
    states = generator_states(devices)
    token = _PRESERVED.set(True)
    try:
        yield
    finally:
        _PRESERVED.reset(token)
        set_generator_states(states, devices)


def generator_states(devices: list[torch.device] | None = None) -> list[Tensor]:
    """The states of torch's CPU generator and of the given CUDA devices' generators, in that order (copies)."""
    return [torch.default_generator.get_state(), *(torch.cuda.get_rng_state(d) for d in _cuda(devices))]


def set_generator_states(states: list[Tensor], devices: list[torch.device] | None = None) -> None:
    """Put back states that :func:`generator_states` took for the same ``devices``."""
    torch.default_generator.set_state(states[0])
    for device, state in zip(_cuda(devices), states[1:], strict=True):
        torch.cuda.set_rng_state(state, device)


def _cuda(devices: list[torch.device] | None) -> list[torch.device]:
    """The CUDA devices among ``devices`` (each has a generator of its own)."""
    return [d for d in devices or [] if d.type == "cuda"]


@contextmanager
def seeded(seed: int, devices: list[torch.device] | None = None) -> Iterator[None]:
    """Run a block with torch's CPU generator (and those of the given CUDA devices) seeded, restoring them after.

    Cheaper than ``torch.manual_seed`` inside ``torch.random.fork_rng``, which visits every accelerator backend; this
    runs once per client and round. Inside :func:`rng_preserved` (the engine's rounds), the generators are restored
    when that block ends rather than after this one.
    """
    with nullcontext() if _PRESERVED.get() else rng_preserved(devices):
        torch.default_generator.manual_seed(seed)
        for device in _cuda(devices):
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield
