"""Where a stacked round's CPU goes beside the bare ``vmap`` FedAvg: the stacked runner's parts, per round.

The companion of ``engine_overhead.py --stack`` (same federation, model, trainer settings and vmap reference). It wraps
the calls of the stacked path (``src/`` is not touched; the wrappers are set for the run) with process-CPU timers and
runs ``fit`` with ``stack_clients=--stack`` and the vmap reference once each, then prints the CPU milliseconds per
round of each part: a client's ``start`` (its state and the server's payload loaded into its module, the
``on_client_fit_start`` hook), ``submit`` (its batches drawn, its state taken), the stacks' ``train_stack`` (its
stacked leaves, the ``vmap`` steps, the states split back), ``finish`` (each client's upload built and admitted),
and the rest of the round (sampling, aggregation, the round's metrics). A part's row includes the rows indented under
it, not the other parts (a full stack trains inside its last client's ``submit``: counted under ``train_stack``).
``--cprofile`` also prints ``cProfile``'s top calls of the stacked fit by own CPU time. The vmap reference's
``groups`` row is its whole training (its layout, steps and sums). Nothing is asserted or written.
``python benchmarks/stacked_overhead_profile.py --clients 100 1000 [--rounds 6] [--stack 64] [--cprofile]``
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import statistics
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

import engine_overhead as eo
from fedhet.plugins.clients import context, local_step, stacked

_PARTS: list[tuple[Any, str, str]] = [
    (context.ClientContext, "start", "start"),
    (context.ClientContext, "load", "  load"),
    (stacked.StackedRunner, "submit", "submit"),
    (stacked, "_schedule_batches", "  batches"),
    (stacked, "train_stack", "train_stack"),
    (stacked, "_stacked_leaves", "  stacked leaves"),
    (local_step.StackedStep, "__call__", "  vmap steps"),
    (stacked, "unstack_states", "  split back"),
    (context.ClientContext, "finish", "finish"),
    (context.ClientContext, "admit", "  admit"),
]


def _timed(function: Callable[..., Any], label: str, spent: Counter[str], tops: list[float]) -> Callable[..., Any]:
    """``function`` adding its process CPU time to ``spent[label]``.

    A top-level part (a label without indent) leaves out the time of the top-level parts it calls (``tops`` holds the
    time they took, per open call): a full stack trains inside the ``submit`` of its last client.
    """
    top = not label.startswith(" ")

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time_ns()
        if top:
            tops.append(0.0)
        try:
            return function(*args, **kwargs)
        finally:
            elapsed = time.process_time_ns() - start
            if top:
                nested = tops.pop()
                spent[label] += elapsed - nested
                if tops:
                    tops[-1] += elapsed
            else:
                spent[label] += elapsed

    return timed


def breakdown(clients: int, rounds: int, stack: int, profile: bool) -> None:
    """Print the parts of a stacked round against the vmap reference for ``clients`` clients."""
    federation, train = eo.make_federation(eo.make_client_tensors(clients, 0))
    eo.run_fedhet(federation, 2, stack_clients=stack)  # warm-up, untimed
    spent: Counter[str] = Counter()
    originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in _PARTS]
    tops: list[float] = []
    for owner, name, label in _PARTS:
        setattr(owner, name, _timed(getattr(owner, name), label, spent, tops))
    profiler = cProfile.Profile(time.process_time) if profile else None
    try:
        if profiler is not None:
            profiler.enable()
        run = eo.run_fedhet(federation, rounds, stack_clients=stack)
        if profiler is not None:
            profiler.disable()
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    reference_spent: Counter[str] = Counter()
    group = eo._train_vmap_group
    eo._train_vmap_group = _timed(group, "groups", reference_spent, [])
    try:
        reference = eo.run_vmap_reference(train, rounds, 0, stack)
    finally:
        eo._train_vmap_group = group
    ours, theirs = statistics.median(run.cpu_s[1:-1]), statistics.median(reference.cpu_s[1:-1])
    print(f"\n{clients} clients, stacks of {stack}: stacked {ours * 1e3:.1f} ms/round, vmap reference"
          f" {theirs * 1e3:.1f} ms/round ({ours / theirs:.2f}x; timers on)")  # fmt: skip
    whole = rounds * 1e6
    parts = sum(spent[label] for _, _, label in _PARTS if not label.startswith(" "))
    for _, _, label in _PARTS:
        print(f"  {label:<22} {spent[label] / whole:8.2f} ms/round")
    print(f"  {'rest of the round':<22} {(sum(run.cpu_s) * 1e9 - parts) / whole:8.2f} ms/round (all rounds)")
    print(f"  {'reference groups':<22} {reference_spent['groups'] / whole:8.2f} ms/round")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    """Parse the arguments and print a breakdown per number of clients."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=6, help="rounds per fit, >= 3")
    parser.add_argument("--stack", type=int, default=64, help="stack_clients")
    parser.add_argument("--cprofile", action="store_true", help="also print cProfile's top calls by own CPU time")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for clients in args.clients:
        breakdown(clients, args.rounds, args.stack, args.cprofile)


if __name__ == "__main__":
    main()
