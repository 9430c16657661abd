"""How far two float32 runs of the same maths may differ: a multiple of how far rounding alone moves the result.

Two paths that compute the same maths in another order (clients in stacks or one by one, other kernels) differ in
float32 by their roundings, carried through training; how far depends on the run (Adam's division by small second
moments, a nearly singular covariance) and on the CPU's kernels, so no fixed tolerance holds on every machine. A run
of the first path on data moved by one unit in the last place (``make_client(..., nudge=True)``) measures how far
one rounding of the inputs moves this run's result on this machine: the *rounding spread*. The second path may
differ from the first by at most :data:`FACTOR` times that spread, over all of the federation's floating-point
tensors together (Euclidean norm), and over its rounds' mean training losses. A mistake (a wrong batch, a state not
carried over) moves a result by about a learning rate, orders of magnitude beyond it; the same runs in float64
check that both paths compute the same maths to 1e-10.

Measured on an AVX-512 CPU and with ``ATEN_CPU_CAPABILITY=default`` (19 stacked-vs-sequential runs): the stacked
path's distance is 0.01 to 2.8 times the rounding spread.
"""

from __future__ import annotations

from typing import Any

import torch

#: how many rounding spreads two float32 paths of the same maths may be apart
FACTOR = 10.0

#: how far float64 runs of two paths of the same maths may be apart: rounding (1e-16), amplified by training far less
#: than a mistake would move them (about a learning rate, 1e-2)
FLOAT64 = {"rtol": 1e-10, "atol": 1e-12}


def federation_vector(trainer: Any) -> torch.Tensor:
    """Every floating-point tensor of a trained federation: shared, each client's personal, the server's statistics
    and per-client payloads, in one vector (float64)."""
    server = trainer.server_state
    groups = [server.shared, server.statistics, *(trainer.store[cid].personal for cid in sorted(trainer.store))]
    groups += [server.per_client[cid] for cid in sorted(server.per_client)]
    parts = [group[name] for group in groups for name in sorted(group)]
    return torch.cat([part.detach().flatten().double() for part in parts if part.is_floating_point()])


def losses(trainer: Any) -> torch.Tensor:
    """The rounds' mean training losses."""
    return torch.tensor([row["train/loss_mean"] for row in trainer.history], dtype=torch.float64)


def assert_within_rounding(first: Any, second: Any, nudged: Any, factor: float = FACTOR) -> None:
    """``second`` is within ``factor`` rounding spreads of ``first`` (``nudged``: ``first``'s run on nudged data)."""
    for measure in (federation_vector, losses):
        spread = (measure(nudged) - measure(first)).norm()
        distance = (measure(second) - measure(first)).norm()
        assert spread > 0, f"{measure.__name__}: the nudged run gave the same result; nudge the data of every client"
        assert distance <= factor * spread, (
            f"{measure.__name__}: the two paths are {distance:.3g} apart, {distance / spread:.2f} times the rounding"
            f" spread {spread:.3g} (allowed: {factor})"
        )
