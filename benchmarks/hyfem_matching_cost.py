"""HyFEM: seconds of one round of neuron matching as the number of clients and the hidden width grow.

Zhang, Yin, Chen & Hong, "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and
Implementation", TMLR 2024. One round's :func:`~fedhet.functional.model_matching` (``2M`` passes, exact cost) on
random classifiers: 4 blocks of 32 features, each client holding 3, 10 classes; median of 3, one torch thread.
HyFEM's accuracy against stand-alone, centralised and FedProx is a suite: ``fedhet compare -c
benchmarks/suites/hyfem_digits.yaml`` (``benchmarks/results/suites/hyfem_digits/table.md``).

Run from the repository root: ``python benchmarks/hyfem_matching_cost.py``. Writes
``benchmarks/results/hyfem_matching_cost.{csv,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from _common import RESULTS_DIR, environment, write_table
from fedhet.functional import Classifier, model_matching


def matching_seconds(num_clients: int, hidden: int, blocks: int = 4, width: int = 32, repeats: int = 3) -> float:
    """Median seconds of one round's matching: ``num_clients`` random clients with 3 of ``blocks`` blocks each."""
    g = torch.Generator().manual_seed(0)
    e0 = blocks * width
    cols = [
        torch.cat([torch.arange(b * width, (b + 1) * width) for b in range(blocks) if b != m % blocks])
        for m in range(num_clients)
    ]
    clients = [
        Classifier(
            torch.randn(hidden, len(c), generator=g),
            torch.randn(hidden, generator=g),
            torch.randn(10, hidden, generator=g),
            torch.randn(10, generator=g),
        )
        for c in cols
    ]
    previous = Classifier(torch.randn(hidden, e0), torch.randn(hidden), torch.randn(10, hidden), torch.randn(10))
    weights = [1.0 / num_clients] * num_clients
    perms = [torch.arange(hidden)] * num_clients
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model_matching(
            clients, cols, perms, weights, previous, 2 * num_clients, "exact", torch.Generator().manual_seed(1)
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    torch.set_num_threads(1)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    cost = [{"clients": m, "hidden": 64, "seconds_per_round": matching_seconds(m, 64)} for m in (4, 8, 16, 32)]
    cost += [{"clients": 6, "hidden": h, "seconds_per_round": matching_seconds(6, h)} for h in (32, 64, 128, 256)]
    for row in cost:
        row["seconds_per_round"] = round(row["seconds_per_round"], 4)
    write_table(
        "hyfem_matching_cost",
        "HyFEM: cost of one round of neuron matching",
        cost,
        {"clients": "clients M", "hidden": "hidden H = H_0", "seconds_per_round": "seconds per round"},
        [
            "`model_matching` with 2M passes, exact cost, 4 blocks of 32 features (each client holds 3), 10"
            " classes, random classifiers; median of 3, one torch thread."
        ],
        environment(config="none: random classifiers built by the script (above); no fedhet config or suite"),
    )


if __name__ == "__main__":
    main()
