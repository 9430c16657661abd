"""Where fedhet's per-client time goes: in-situ timers around the calls the engine makes for each client.

The companion of ``engine_overhead.py`` (same federation, model, trainer settings and bare reference). Instead of
sampling, it wraps the functions and methods on the path of one client's round with ``perf_counter`` timers, by
monkeypatching them for the duration of the run (``src/`` is not touched), then runs ``fit`` and the reference
once each. Times are inclusive (a call's time includes the wrapped calls it makes; a function re-entered while
already being timed, such as a nested ``Module.__call__``, is counted once, at its outermost call) and are
reported in microseconds per client per round, over the steady-state rounds ``1 .. R-2`` only, like the benchmark.
The primitives both sides share (``load_state_dict``, ``SGD.__init__``, ``Module.__call__``, ``cross_entropy``,
``Tensor.backward``, ``SGD.step``, ``zero_grad``, ``state_dict``) are timed on the reference too, so the two
columns can be compared row by row. Each timer adds well under a microsecond per call (the calibration is printed);
nothing is asserted.

``--apply`` patches in candidate fixes from ``engine_overhead_fixes.py`` on the fedhet side, to measure what they
would save before they are written in ``src/``.

Usage:
    From the repository root::

        python benchmarks/engine_overhead_profile.py --clients 1000 --rounds 4
        python benchmarks/engine_overhead_profile.py --clients 1000 --rounds 4 --apply all
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from engine_overhead import RESULTS_DIR, make_client_tensors, make_federation, make_model, make_trainer, run_reference
from engine_overhead_fixes import FIXES, applied


class Timers:
    """Inclusive timers keyed by label; a label already on the stack is not timed again (recursion, nesting).

    ``clock`` is ``time.thread_time`` (CPU time of this thread: other processes on a busy machine do not inflate
    it) or ``time.perf_counter`` (wall time). Each timed call's time has the calibrated cost of the timers of the
    timed calls under it taken off.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.active: Counter[str] = Counter()
        self.nested: list[int] = []  # per open timed call: timed calls made under it so far
        self.enabled = False
        self.clock: Callable[[], float] = time.thread_time
        self.cost = 0.0  # seconds one timer adds to its caller

    def reset(self) -> None:
        """Forget everything timed so far."""
        self.seconds.clear()
        self.calls.clear()


TIMERS = Timers()


def timed(fn: Callable, label: str) -> Callable:
    """``fn`` with its calls timed under ``label`` while the timers are enabled."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not TIMERS.enabled or TIMERS.active[label]:
            return fn(*args, **kwargs)
        TIMERS.active[label] += 1
        TIMERS.nested.append(0)
        start = TIMERS.clock()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = TIMERS.clock() - start
            nested = TIMERS.nested.pop()
            TIMERS.seconds[label] += elapsed - nested * TIMERS.cost
            TIMERS.calls[label] += 1
            TIMERS.active[label] -= 1
            if TIMERS.nested:
                TIMERS.nested[-1] += nested + 1

    return wrapper


class _TimedContext:
    """A context manager whose ``__enter__`` and ``__exit__`` are timed (its body is not)."""

    def __init__(self, context: Any, label: str) -> None:
        self.context = context
        self.enter = timed(context.__enter__, f"{label} __enter__")
        self.exit = timed(context.__exit__, f"{label} __exit__")

    def __enter__(self) -> Any:
        return self.enter()

    def __exit__(self, *exc: object) -> Any:
        return self.exit(*exc)


def timed_context(factory: Callable, label: str) -> Callable:
    """``factory`` (which returns a context manager) timed when called, and its enter and exit timed separately."""
    make = timed(factory, f"{label} (make)")

    @functools.wraps(factory)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _TimedContext(make(*args, **kwargs), label)

    return wrapper


@contextlib.contextmanager
def patched(targets: list[tuple[Any, str, str, bool]]) -> Any:
    """Wrap ``owner.name`` with a timer (or a context timer) labelled ``label`` for each target, then restore.

    Only attributes that ``owner`` defines itself are wrapped; missing ones are skipped.
    """
    saved = []
    try:
        for owner, name, label, is_context in targets:
            if owner is None or name not in vars(owner):
                continue  # not in this version of the code
            original = vars(owner)[name]
            saved.append((owner, name, original))
            setattr(owner, name, (timed_context if is_context else timed)(getattr(owner, name), label))
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def fedhet_targets() -> list[tuple[Any, str, str, bool]]:
    """What to time on the fedhet side: (owner, attribute, label, is a context manager).

    Targets the engine no longer has (it changes) are skipped by :func:`patched`.
    """
    from lightning.fabric import Fabric
    from lightning.fabric.wrappers import _FabricOptimizer
    from torch.utils.data.dataloader import DataLoader, _BaseDataLoaderIter

    import fedhet.datamodules.tensor_dataset as tensor_dataset
    import fedhet.plugins.local_loop as local_loop
    import fedhet.plugins.trainer as trainer
    from fedhet.datamodules import ClientDataModule, FederatedDataModule
    from fedhet.modules.base import FederatedModule
    from fedhet.modules.classifier import FederatedClassifier
    from fedhet.plugins.aggregators import WeightedMean
    from fedhet.plugins.state import ClientUpdate, ServerState

    ft = trainer.FederatedTrainer
    batch_loader = getattr(tensor_dataset, "TensorBatchLoader", None)
    return [
        (ft, "_fit_client", "_fit_client", False),
        (ft, "_load_client", "_fit_client > _load_client", False),
        (FederatedModule, "setup_client", "_load_client > setup_client", False),
        (FederatedModule, "load_state_dict", "_load_client > FederatedModule.load_state_dict (fix: load)", False),
        (FederatedModule, "client_signature", "client_signature", False),
        (ServerState, "payload_for", "_load_client > payload_for", False),
        (trainer, "num_bytes", "_load_client > num_bytes (x2)", False),
        (trainer, "move_data_to_device", "move_data_to_device", False),
        (ft, "owns", "_run_round > owns", False),
        (trainer, "seeded", "_fit_client > seeded", True),
        (torch, "manual_seed", "seeded > torch.manual_seed", False),
        (torch, "get_rng_state", "seeded > torch.get_rng_state (fork_rng)", False),
        (torch, "set_rng_state", "seeded > torch.set_rng_state (fork_rng)", False),
        (trainer, "derive_seed", "_fit_client > derive_seed", False),
        (FederatedDataModule, "client", "_fit_client > datamodule.client(id)", False),
        (ClientDataModule, "train_dataloader", "_fit_client > train_dataloader()", False),
        (FederatedModule, "local_phases", "_fit_client > local_phases()", False),
        (trainer, "run_local_training", "_fit_client > run_local_training", False),
        (local_loop, "configure_optimizer", "local > configure_optimizer (SGD.__init__)", False),
        (Fabric, "setup_optimizers", "local > fabric.setup_optimizers", False),
        (nn.Module, "train", "local > module.train()", False),
        (FederatedModule, "set_local_phase", "local > set_local_phase (x2)", False),
        (DataLoader, "__iter__", "local > DataLoader.__iter__ (iterator creation)", False),
        (_BaseDataLoaderIter, "__next__", "local > DataLoader __next__ (batches + StopIteration)", False),
        (batch_loader, "__iter__", "local > TensorBatchLoader.__iter__ (generator creation)", False),
        (Fabric, "to_device", "local > fabric.to_device(batch)", False),
        (Fabric, "autocast", "local > fabric.autocast()", True),
        (FederatedClassifier, "training_step", "local > training_step", False),
        (FederatedModule, "log", "training_step > self.log (no-op)", False),
        (Fabric, "backward", "local > fabric.backward", False),
        (_FabricOptimizer, "__init__", "setup_optimizers > _FabricOptimizer.__init__ (new class)", False),
        (_FabricOptimizer, "step", "local > _FabricOptimizer.step", False),
        (torch.optim.Optimizer, "state_dict", "local > optimizer.state_dict()", False),
        (FederatedModule, "shared_state_dict", "_fit_client > shared_state_dict()", False),
        (trainer, "to_cpu", "_fit_client > to_cpu (x3)", False),
        (FederatedModule, "client_statistics", "_fit_client > client_statistics()", False),
        (ClientUpdate, "__init__", "_fit_client > ClientUpdate()", False),
        (Fabric, "call", "fabric.call (x2 per client)", False),
        (trainer, "all_finite", "_run_round > all_finite (x2)", False),
        (trainer, "non_finite", "_run_round > non_finite", False),
        (WeightedMean, "update", "_run_round > WeightedMean.update", False),
        (WeightedMean, "compute", "_run_round > WeightedMean.compute (per round)", False),
    ]


def shared_targets() -> list[tuple[Any, str, str, bool]]:
    """Primitives timed on both sides."""
    return [
        (nn.Module, "load_state_dict", "= Module.load_state_dict", False),
        (torch.optim.SGD, "__init__", "= SGD.__init__", False),
        (nn.Module, "__call__", "= model forward (Module.__call__)", False),
        (F, "cross_entropy", "= F.cross_entropy", False),
        (torch.Tensor, "backward", "= Tensor.backward", False),
        (torch.optim.SGD, "step", "= SGD.step", False),
        (torch.optim.Optimizer, "zero_grad", "= Optimizer.zero_grad", False),
        (nn.Module, "state_dict", "= Module.state_dict", False),
    ]


Profile = tuple[dict[str, float], dict[str, int], float]


def profile_fedhet(federation: Any, rounds: int) -> Profile:
    """Run ``fit``, timing rounds ``1 .. rounds-2``: seconds and calls by label, and those rounds' seconds."""
    from fedhet.plugins.trainer import FederatedTrainer

    original = FederatedTrainer._run_round
    span = [0.0, 0.0]

    def run_round(self: FederatedTrainer, round_idx: int) -> dict[str, float]:
        if round_idx in (1, rounds - 1):
            span[round_idx != 1] = TIMERS.clock()
        TIMERS.enabled = 1 <= round_idx < rounds - 1
        try:
            return original(self, round_idx)
        finally:
            TIMERS.enabled = False

    TIMERS.reset()
    gc.collect()
    with patched(fedhet_targets() + shared_targets()):
        FederatedTrainer._run_round = run_round
        try:
            make_trainer(rounds).fit(make_model(), federation)
        finally:
            FederatedTrainer._run_round = original
    return dict(TIMERS.seconds), dict(TIMERS.calls), span[1] - span[0]


def profile_reference(clients: list, rounds: int) -> Profile:
    """The reference with the shared primitives timed in rounds ``1 .. rounds-2``."""
    span = [0.0, 0.0]

    def at_round_start(round_idx: int) -> None:
        if round_idx in (1, rounds - 1):
            span[round_idx != 1] = TIMERS.clock()
        TIMERS.enabled = 1 <= round_idx < rounds - 1

    TIMERS.reset()
    gc.collect()
    with patched(shared_targets()):
        run_reference(clients, rounds, seed=0, round_hook=at_round_start)
    TIMERS.enabled = False
    return dict(TIMERS.seconds), dict(TIMERS.calls), span[1] - span[0]


def median_profile(profiles: list[Profile]) -> Profile:
    """Per label, the median over repeats."""
    labels = {label for seconds, _, _ in profiles for label in seconds}
    return (
        {label: statistics.median(p[0].get(label, 0.0) for p in profiles) for label in labels},
        {label: max(p[1].get(label, 0) for p in profiles) for label in labels},
        statistics.median(p[2] for p in profiles),
    )


def timer_cost() -> float:
    """Seconds a timer adds to its caller for one call (wrapped minus bare, for a trivial function)."""

    def bare() -> None:
        return None

    wrapped = timed(bare, "calibration")
    TIMERS.enabled = True
    costs = []
    for _ in range(7):
        start = TIMERS.clock()
        for _ in range(20_000):
            bare()
        middle = TIMERS.clock()
        for _ in range(20_000):
            wrapped()
        costs.append(((TIMERS.clock() - middle) - (middle - start)) / 20_000)
    TIMERS.enabled = False
    TIMERS.reset()
    return min(costs)


def report(fedhet: Profile, reference: Profile, client_rounds: int) -> list[str]:
    """Markdown lines: one row per label, µs and calls per client-round on each side."""
    (f_sec, f_calls, f_total), (r_sec, r_calls, r_total) = fedhet, reference
    per = 1e6 / client_rounds
    lines = [
        f"Steady-state round per client: fedhet {f_total * per:.0f} µs, reference {r_total * per:.0f} µs"
        f" (ratio {f_total / r_total:.2f}x, difference {(f_total - r_total) * per:.0f} µs).",
        "",
        "| call (inclusive) | fedhet µs/client | calls/client | reference µs/client | calls/client |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = sorted(set(f_sec) | set(r_sec), key=lambda k: (not k.startswith("="), -f_sec.get(k, 0.0)))
    for label in labels:
        cells = [label.removeprefix("= ")]
        for sec, calls in ((f_sec, f_calls), (r_sec, r_calls)):
            cells += [f"{sec[label] * per:.1f}", f"{calls[label] / client_rounds:.2f}"] if label in sec else ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per run, >= 3 (0 and R-1 are not timed)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each side; medians are reported")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="thread CPU time or wall time")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--apply", nargs="*", default=[], choices=[*FIXES, "all"], help="candidate fixes to patch in on the fedhet side"
    )
    parser.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3")
    torch.set_num_threads(args.threads)
    TIMERS.clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    federation, clients = make_federation(make_client_tensors(args.clients, args.seed))
    make_trainer(3).fit(make_model(), make_federation(make_client_tensors(8, args.seed))[0])  # warm-up
    TIMERS.cost = timer_cost()
    fedhet, reference = [], []
    for repeat in range(args.repeats):
        for side in ("reference", "fedhet") if repeat % 2 == 0 else ("fedhet", "reference"):
            if side == "fedhet":
                with applied(args.apply):
                    fedhet.append(profile_fedhet(federation, args.rounds))
            else:
                reference.append(profile_reference(clients, args.rounds))
        print(f"repeat {repeat + 1}/{args.repeats}: fedhet {fedhet[-1][2]:.2f} s, reference {reference[-1][2]:.2f} s")
    client_rounds = args.clients * (args.rounds - 2)
    lines = [
        f"# Engine overhead profile: {args.clients} clients, rounds 1..{args.rounds - 2} of {args.rounds},"
        f" {args.threads} thread(s), {args.clock} time"
        + (f", with candidate fixes {'+'.join(args.apply)} patched in" if args.apply else ""),
        "",
        f"Written by `{' '.join(['python', *sys.argv])}`. Medians over {args.repeats} interleaved runs of each side."
        f" A timer costs its caller {TIMERS.cost * 1e6:.2f} µs, taken off the times of the calls around it; rows"
        " nest (see the labels), so they do not add up.",
        "",
        *report(median_profile(fedhet), median_profile(reference), client_rounds),
        "",
    ]
    print("\n".join(lines))
    if not args.no_save:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        suffix = "_" + "+".join(args.apply) if args.apply else ""
        (args.output_dir / f"engine_overhead_profile{suffix}.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
