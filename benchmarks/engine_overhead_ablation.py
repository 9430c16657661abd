"""Engine overhead by ablation: what each per-client safeguard of the engine costs inside a real FedAvg round.

What is measured:
    The FedAvg rounds of ``engine_overhead.py`` (synthetic tabular clients, MLP 32-64-10, 2-4 optimizer steps per
    client and round) run by fedhet as it is, by fedhet with one per-client piece switched off, and by the bare
    PyTorch loop, interleaved in one process. A piece's cost is the drop in time per client when it is switched off.
    Timing a piece in place (rather than in a micro-benchmark) counts what it does to the rest of the round: a copy
    that allocates fresh memory for every client also makes the next client's steps miss the cache.

    The pieces (each switched off by replacing one function for the duration of the runs; the results of such a run
    are wrong on purpose, only its time counts):
        * ``upload copy``: ``to_cpu``, the snapshot of a client's shared tensors and personal state that lets the
          same module serve the next client while callbacks and the aggregator still read this one's upload;
        * ``float64 aggregation``: ``WeightedMean.update``, the running sums kept in float64 (the bare loop adds in
          float32);
        * ``non-finite check``: ``non_finite``, the NaN/Inf scan that keeps a diverged client out of the aggregate;
        * ``seed derivation``: ``derive_seed``, the hash that gives each (round, client) its own reproducible seed;
        * ``seeding``: ``seeded``, seeding the generator for each client (the caller's generator is restored once per
          round, by ``rng_preserved``, which stays on);

    and, the other way round, one structural saving switched off to show what it saves:
        * ``new optimizer per client``: FedAvg's ``reuse_optimizers`` set to false, so each client gets a new
          optimizer from ``configure_optimizers()`` (as before the engine reused one per module, reset per client).

    A second reference, the **bare loop with the guarantees**, is the bare loop plus what those safeguards promise,
    written as plainly as a strong engineer would in the same loop: each (round, client) seeded from ``derive_seed``
    (the caller's generator restored once per round), the client's parameters checked for NaN/Inf (one sum and one
    read per tensor) before they count, and the running sums kept in float64; it needs no upload copy, since it adds
    each client into the sums at once. fedhet over the bare loop splits into what the guarantees cost (this row over
    the bare loop) and what the engine's structure costs (fedhet over this row: the client's upload kept as an object
    that callbacks, the aggregator and other processes read, hooks, phases, metrics).

    Time is process CPU time per steady-state round (rounds ``1 .. R-2``), pooled over the repeats; the statistic is
    the mean of the fastest quarter of rounds of each variant, which bursts of load from other processes on a shared
    machine do not reach. Nothing is asserted.

Usage::

    python benchmarks/engine_overhead_ablation.py                 # 100 clients, 12 rounds, 8 repeats
    python benchmarks/engine_overhead_ablation.py --clients 1000 --rounds 5 --repeats 3

Results go to ``benchmarks/results/engine_overhead_ablation.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from unittest.mock import patch

import torch
from torch import Tensor

import fedhet.plugins.clients.context as context
import fedhet.plugins.uploads.aggregators as aggregators
import fedhet.plugins.uploads.policies as policies
from _common import environment, write_table
from engine_overhead import (
    WORKLOADS,
    ReferenceNet,
    Run,
    heap_setting,
    make_client_tensors,
    make_federation,
    reference_optimizer,
    run_fedhet,
    run_reference,
    train_epoch,
)
from fedhet.core import derive_seed, rng_preserved
from fedhet.modules.baselines import FedAvg

VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "fedhet": contextlib.nullcontext,
    "without upload copy": lambda: patch.object(context, "to_cpu", dict),
    "without float64 aggregation": lambda: patch.object(aggregators.WeightedMean, "update", lambda self, upload: None),
    "without non-finite check": lambda: patch.object(policies, "non_finite", lambda *payloads: []),
    "without seed derivation": lambda: patch.object(context, "derive_seed", lambda seed, *keys: seed),
    "without seeding": lambda: patch.object(context, "seeded", lambda *a, **k: contextlib.nullcontext()),
}


@contextlib.contextmanager
def _all_off() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name, variant in VARIANTS.items():
            if name.startswith("without") and name != "without all five":
                stack.enter_context(variant())
        yield


VARIANTS["without all five"] = _all_off
VARIANTS["new optimizer per client"] = lambda: patch.object(FedAvg, "reuse_optimizers", False)
GUARDED = "bare loop with the guarantees"

COLUMNS = {
    "variant": "variant",
    "us_per_client": "µs per client",
    "overhead_us": "over the bare loop, µs",
    "cost_us": "cost of the piece, µs",
}


def run_guarded_reference(clients: list[tuple[Tensor, Tensor]], rounds: int, seed: int) -> Run:
    """The bare loop (``engine_overhead.run_reference``, tiny workload) with the engine's guarantees, written plainly.

    Per client: its draws seeded from ``derive_seed(seed, "fit", round, index)``; after training, a NaN/Inf check of
    its parameters (a client that fails it is left out); its parameters added into float64 running sums. The
    caller's generator is restored once per round.
    """
    workload = WORKLOADS["tiny"]
    torch.manual_seed(seed)
    model = ReferenceNet(workload)
    params = list(model.parameters())
    global_state = [p.detach().clone() for p in params]
    optimizer = reference_optimizer(params, workload)
    batch_size = workload.batch_size
    run = Run()
    for round_idx in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        sums = [torch.zeros_like(value, dtype=torch.float64) for value in global_state]
        total, steps = 0, 0
        with rng_preserved():
            for index, (x, y) in enumerate(clients):
                with torch.no_grad():
                    for param, value in zip(params, global_state, strict=True):
                        param.copy_(value)
                torch.default_generator.manual_seed(derive_seed(seed, "fit", round_idx, index))
                steps += train_epoch(model, optimizer, x, y, batch_size)
                n = len(y)
                with torch.no_grad():
                    if not all(math.isfinite(param.sum().item()) for param in params):
                        continue
                    for acc, param in zip(sums, params, strict=True):
                        acc.add_(param, alpha=n)
                total += n
        global_state = [(value / total).to(torch.float32) for value in sums]
        run.cpu_s.append(time.process_time() - start_cpu)
        run.wall_s.append(time.perf_counter() - start)
        run.steps = steps
    return run


def fastest_quarter(values: list[float]) -> float:
    """The mean of the fastest quarter of ``values`` (at least one)."""
    ordered = sorted(values)
    return statistics.mean(ordered[: max(1, len(ordered) // 4)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=12, help="rounds per run, >= 3")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: round 0 and the last round are not timed")
    torch.set_num_threads(1)
    logging.getLogger("lightning").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="lightning")

    malloc = heap_setting(True)  # fedhet's default allocator setting, for every variant and reference alike
    federation, clients = make_federation(make_client_tensors(args.clients, args.seed))
    run_fedhet(federation, 3)  # warm-up, untimed
    run_reference(clients, 3, args.seed)
    run_guarded_reference(clients, 3, args.seed)
    rounds: dict[str, list[float]] = {name: [] for name in [*VARIANTS, GUARDED, "bare loop"]}
    for repeat in range(args.repeats):
        for name in rounds:
            gc.collect()
            if name == "bare loop":
                run = run_reference(clients, args.rounds, seed=repeat)
            elif name == GUARDED:
                run = run_guarded_reference(clients, args.rounds, seed=repeat)
            else:
                with VARIANTS[name]():
                    run = run_fedhet(federation, args.rounds)
            rounds[name] += run.cpu_s[1 : args.rounds - 1]
        print(f"  repeat {repeat + 1}/{args.repeats} done", flush=True)

    per_client = {name: fastest_quarter(times) / args.clients * 1e6 for name, times in rounds.items()}
    bare, full = per_client["bare loop"], per_client["fedhet"]
    rows = [
        {
            "variant": name,
            "us_per_client": round(value, 1),
            "overhead_us": round(value - bare, 1),
            "cost_us": "" if name in ("fedhet", GUARDED, "bare loop") else round(full - value, 1),
        }
        for name, value in per_client.items()
    ]
    for row in rows:
        print(" | ".join(str(row[key]) for key in COLUMNS))
    if not args.no_save:
        command = "python benchmarks/engine_overhead_ablation.py"
        command += f" --clients {args.clients} --rounds {args.rounds} --repeats {args.repeats}"
        notes = [
            "Written by `benchmarks/engine_overhead_ablation.py` (its docstring explains the method): process CPU"
            " time per client and round, mean of the fastest quarter of steady-state rounds; a piece's cost is fedhet's"
            " time less the time with that piece switched off. Repeated runs of the script move a piece's cost by up"
            " to ~30 µs: read the pieces together rather than one by one. The last row switches a saving off (a new"
            " optimizer per client instead of one reused per module): its negative cost is what the reuse saves. The"
            " bare loop with the guarantees is the bare loop plus seeded clients, a NaN/Inf check and float64 sums,"
            " written plainly: what any engine with these guarantees costs at least, written the obvious way.",
            "",
            f"- command: `{command}`",
        ]
        env = {**environment(args.seed), "malloc": malloc}
        print(write_table("engine_overhead_ablation", "Engine overhead by ablation", rows, COLUMNS, notes, env))


if __name__ == "__main__":
    main()
