"""What keeping freed memory in the C heap (``retain_cpu_heap``, ``fedhet.plugins.processes.heap``) does to a CPU run.

What runs:
    The same fit in fresh processes, alternating ``--repeats`` times between the trainer's default
    (``retain_cpu_heap=True``: glibc's mmap and trim thresholds raised to 32 / 128 MiB when the run launches) and
    glibc's own adaptive thresholds (``retain_cpu_heap=False``). A fresh process per fit, because the setting is
    process-wide and cannot be undone. The workload (``--workload``) is one of ``engine_overhead.py``'s: by default
    ``cnn``, FedAvg with the FedPAC paper's Fashion-MNIST CNN on synthetic 1 x 28 x 28 images (600 samples per client,
    batch 50, E = 5, SGD with momentum), ``--clients`` clients, ``--rounds`` rounds, one torch thread.

How it is measured:
    Each round's process CPU time (a callback reads ``time.process_time`` at a round's start and end) and the minor
    page faults the process took during the fit (``getrusage``'s ``ru_minflt``: pages the kernel had to map and zero).
    Reported per setting: the mean and the range of the per-round times pooled over the repeats (round 0, which builds
    the clients, and the last, which evaluates, left out), and the mean faults per fit. The speed-up is the mean round
    with glibc's thresholds over the mean with the heap kept. Nothing is asserted; the machine should be idle.

Usage::

    python benchmarks/heap_retention.py                         # cnn, 10 clients, 12 rounds, 3 repeats
    python benchmarks/heap_retention.py --workload mlp --clients 100 --rounds 8

Results go to ``benchmarks/results/heap_retention.csv`` and ``.md`` (``heap_retention_<workload>`` for another
workload than ``cnn``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from _common import environment, write_table

COLUMNS = {
    "setting": "allocator",
    "fits": "fits",
    "round_cpu_s": "CPU s / round (mean)",
    "round_range_s": "range",
    "faults_per_fit": "page faults / fit",
    "speedup": "speed-up",
}


def one_fit(workload: str, clients: int, rounds: int, retain: bool) -> dict[str, object]:
    """Train once in this process; the steady rounds' CPU seconds and the page faults of the fit."""
    import logging
    import time
    import warnings

    import torch

    import engine_overhead as eo

    torch.set_num_threads(1)
    logging.getLogger("lightning").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    spec = eo.WORKLOADS[workload]
    federation, _ = eo.make_federation(eo.make_client_tensors(clients, 0, spec), spec)
    clock = eo._RoundClock()
    trainer = eo.make_trainer(rounds, [clock], workload=spec, retain_heap=retain)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    trainer.fit(eo.make_model(spec), federation)
    return {
        "rounds_cpu_s": clock.cpu_s[1 : rounds - 1],
        "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
        "fit_s": time.perf_counter() - start,
    }


def run_in_fresh_process(args: argparse.Namespace, retain: bool) -> dict[str, object]:
    """:func:`one_fit` in a new interpreter (the allocator setting cannot be undone in this one)."""
    command = [sys.executable, __file__, "--child", str(int(retain)), "--workload", args.workload]
    command += ["--clients", str(args.clients), "--rounds", str(args.rounds)]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(setting: str, fits: list[dict[str, object]]) -> dict[str, object]:
    rounds = [s for fit in fits for s in fit["rounds_cpu_s"]]  # type: ignore[attr-defined]
    return {
        "setting": setting,
        "fits": len(fits),
        "round_cpu_s": round(statistics.mean(rounds), 3),
        "round_range_s": f"{min(rounds):.2f}-{max(rounds):.2f}",
        "faults_per_fit": round(statistics.mean(fit["faults"] for fit in fits)),  # type: ignore[misc]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="cnn", choices=["tiny", "mlp", "cnn"])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=12, help="rounds per fit, >= 3 (0 and R-1 are not counted)")
    parser.add_argument("--repeats", type=int, default=3, help="fits per setting, alternating")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--child", type=int, choices=[0, 1], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one_fit(args.workload, args.clients, args.rounds, bool(args.child))))
        return
    if args.rounds < 3:
        parser.error("--rounds must be at least 3")
    fits: dict[bool, list[dict[str, object]]] = {True: [], False: []}
    for repeat in range(args.repeats):
        for retain in (True, False) if repeat % 2 == 0 else (False, True):
            fits[retain].append(run_in_fresh_process(args, retain))
            print(f"repeat {repeat + 1}, retain_cpu_heap={retain}: {fits[retain][-1]}", flush=True)
    kept = summary("heap kept (retain_cpu_heap=True, the default)", fits[True])
    system = summary("glibc's own thresholds (retain_cpu_heap=False)", fits[False])
    kept["speedup"] = f"{system['round_cpu_s'] / kept['round_cpu_s']:.2f}x"  # type: ignore[operator]
    system["speedup"] = "1.00x"
    rows = [kept, system]
    if args.no_save:
        print(rows)
        return
    name = "heap_retention" + ("" if args.workload == "cnn" else f"_{args.workload}")
    notes = [
        "Written by `benchmarks/heap_retention.py` (its docstring explains the method): the same fit in a fresh"
        f" process per setting, alternating, {args.repeats} fits each; workload `{args.workload}` of"
        f" `engine_overhead.py`, {args.clients} clients, {args.rounds} rounds (rounds 1..{args.rounds - 2} counted),"
        " one torch thread. Process CPU time per round; minor page faults of the whole fit.",
    ]
    print(write_table(name, "Keeping freed memory in the C heap", rows, COLUMNS, notes, environment(seed=0)))


if __name__ == "__main__":
    main()
