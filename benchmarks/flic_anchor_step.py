"""FLIC's server step: seconds of one anchor aggregation as the number of clients grows.

Rakotomamonjy, Vono, Medina Ruiz & Ralaivola, "Personalised Federated Learning On Heterogeneous Feature Spaces",
TMLR 2024. The server step is the anchors' barycenter (:class:`~fedhet.callbacks.AnchorUpdate`) over ``m`` synthetic
uploads, C = 20 classes, latent k = 64: with fixed covariances (the paper's setting; best of 3) and with learned ones
(Bures fixed point; one run). FLIC's accuracy against its baselines is a suite: ``fedhet compare -c
benchmarks/suites/flic_toys.yaml`` (the toys) and ``benchmarks/suites/flic_digits.yaml`` (the digits family).

Run from the repository root: ``python benchmarks/flic_anchor_step.py``. Writes
``benchmarks/results/flic_anchor_step.{csv,md}``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from _common import environment, write_table
from fedhet.callbacks import AnchorUpdate
from fedhet.callbacks.flic import ANCHOR_FACTORS, ANCHOR_MEANS
from fedhet.core import ClientUpdate


def server_cost(sizes: list[int], learned_sizes: list[int], classes: int = 20, dim: int = 64) -> list[dict[str, Any]]:
    """Seconds of one anchor aggregation (best of 3; one run with learned covariances) for ``m`` synthetic uploads."""
    rows = []
    g = torch.Generator().manual_seed(0)
    for learned, counts in ((False, sizes), (True, learned_sizes)):
        for m in counts:
            updates = []
            for i in range(m):
                stats = {ANCHOR_MEANS: 10 * torch.randn(classes, dim, generator=g)}
                if learned:
                    noise = 0.1 * torch.randn(classes, dim, dim, generator=g)
                    stats[ANCHOR_FACTORS] = (torch.eye(dim) + noise).tril().abs()
                updates.append(ClientUpdate(f"c{i}", 100, {}, stats))
            step = AnchorUpdate()
            best = float("inf")
            for _ in range(1 if learned else 3):
                start = time.perf_counter()
                step.aggregate(updates)
                best = min(best, time.perf_counter() - start)
            rows.append({"clients": m, "covariances": "learned (Bures)" if learned else "fixed", "seconds": best})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-sizes", type=int, nargs="*", default=[10, 100, 1000])
    parser.add_argument("--learned-server-sizes", type=int, nargs="*", default=[10, 100])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = server_cost(args.server_sizes, args.learned_server_sizes)
    for row in rows:
        row["seconds"] = round(row["seconds"], 5)
    write_table(
        "flic_anchor_step",
        "FLIC: server step, one anchor aggregation",
        rows,
        {"clients": "clients", "covariances": "covariances", "seconds": "seconds"},
        [
            "C = 20 classes, k = 64, synthetic uploads (anchor means ~ N(0, 10^2 I)); fixed covariances: best of 3,"
            " learned covariances (Bures fixed point): one run; one torch thread."
        ],
        environment(config="none: synthetic uploads built by the script (above); no fedhet config or suite"),
    )


if __name__ == "__main__":
    main()
