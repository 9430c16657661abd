"""Where fedhet's per-client time goes: in-situ timers around the calls the engine makes for each client.

The companion of ``engine_overhead.py`` (same federation, model, trainer settings and bare reference). Instead of
sampling, it wraps the functions and methods on the path of one client's round with ``perf_counter`` timers, by
monkeypatching them for the duration of the run (``src/`` is not touched), then runs ``fit`` and the reference
once each. Times are inclusive (a call's time includes the wrapped calls it makes; a function re-entered while
already being timed, such as a nested ``Module.__call__``, is counted once, at its outermost call) and are
reported in microseconds per client per round, over the steady-state rounds ``1 .. R-2`` only, like the benchmark.
The primitives both sides share (``Module.load_state_dict``, ``SGD.__init__``, ``Module.__call__``,
``cross_entropy``, ``Tensor.backward``, ``SGD.step``, ``zero_grad``, ``Module.state_dict``, ``Tensor.copy_``,
``Tensor.to``, ``randperm``, ``index_select``) are timed on the reference too, so the two columns can be compared
row by row. A generator (the local loop's batches) is timed per ``next``. ``(self)`` rows give a call's time less
that of the timed calls listed under it (its own Python, plus whatever is not wrapped). The cost of one timer is
calibrated, printed and taken off the calls around it; nothing is asserted.

Usage:
    From the repository root::

        python benchmarks/engine_overhead_profile.py --clients 1000 --rounds 4 --repeats 3
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

from _common import environment
from engine_overhead import (
    RESULTS_DIR,
    heap_setting,
    make_client_tensors,
    make_federation,
    make_model,
    make_trainer,
    run_reference,
)


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


def call_timed(label: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, timed under ``label`` while the timers are enabled and ``label`` is not open."""
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


def timed(fn: Callable, label: str) -> Callable:
    """``fn`` with its calls timed under ``label`` while the timers are enabled."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return call_timed(label, fn, *args, **kwargs)

    return wrapper


class _TimedContext:
    """A context manager whose ``__enter__`` and ``__exit__`` are timed (its body is not)."""

    def __init__(self, context: Any, label: str) -> None:
        self.context = context
        self.label = label

    def __enter__(self) -> Any:
        return call_timed(f"{self.label} __enter__", self.context.__enter__)

    def __exit__(self, *exc: object) -> Any:
        return call_timed(f"{self.label} __exit__", self.context.__exit__, *exc)


def timed_context(factory: Callable, label: str) -> Callable:
    """``factory`` (which returns a context manager) timed when called, and its enter and exit timed separately."""
    make = timed(factory, f"{label} (make)")

    @functools.wraps(factory)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _TimedContext(make(*args, **kwargs), label)

    return wrapper


def timed_iter(factory: Callable, label: str) -> Callable:
    """``factory`` (which returns an iterable, e.g. a generator function) with each ``next`` of its iterator timed.

    The items (one call each) and the final ``StopIteration`` (one more call) are timed; the consumer's work between
    items is not.
    """

    @functools.wraps(factory)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        step = iter(factory(*args, **kwargs)).__next__
        while True:
            try:
                item = call_timed(label, step)
            except StopIteration:
                return
            yield item

    return wrapper


WRAPPERS = {"call": timed, "context": timed_context, "iter": timed_iter}
Target = tuple[Any, str, str, str]  # (owner, attribute, label, kind: a key of WRAPPERS)


@contextlib.contextmanager
def patched(targets: list[Target]) -> Any:
    """Wrap ``owner.name`` with a timer of ``kind`` labelled ``label`` for each target, then restore.

    An attribute that ``owner`` inherits (e.g. ``Tensor.copy_`` from ``torch._C.TensorBase``) is wrapped on ``owner``
    itself and deleted again afterwards. A missing attribute is an error: the engine changed and the profile must
    follow.
    """
    saved = []
    try:
        for owner, name, label, kind in targets:
            if not hasattr(owner, name):
                raise AttributeError(f"{owner!r} has no attribute {name!r}: update the profile's targets")
            own = name in vars(owner)
            saved.append((owner, name, vars(owner)[name] if own else None, own))
            setattr(owner, name, WRAPPERS[kind](getattr(owner, name), label))
        yield
    finally:
        for owner, name, original, own in reversed(saved):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


# labels of the calls timed inside a parent; the report adds a "(self)" row: the parent less these
FIT_CLIENT = "client"
LOCAL = "client > run_local_training"
CHILDREN: dict[str, list[str]] = {
    FIT_CLIENT: [
        "client > load",
        "client > derive_seed",
        "client > seeded (make)",
        "client > seeded __enter__",
        "client > seeded __exit__",
        "client > train_dataloader()",
        "client > local_phases()",
        "client > ModuleSlot.optimizers",
        LOCAL,
        "client > ModuleSlot.tensors",
        "client > to_cpu (x3)",
        "client > client_statistics()",
        "client > ClientUpdate()",
        "client > ClientState()",
        "client > admit > non_finite",
        "CallbackHooks (x2 per client)",
    ],
    "client > load": [
        "load > slot",
        "load > setup_client",
        "load > payload_for",
        "load > ModuleSlot.load",
        "load > num_bytes (x2)",
    ],
    LOCAL: [
        "local > module.train()",
        "local > on_train_start",
        "local > set_local_phase (x2, + 1 in on_train_end)",
        "local > on_train_end (incl. its set_local_phase)",
        "local > batches (_batches next, incl. StopIteration)",
        "local > training_step",
        "= Tensor.backward",
        "= SGD.step",
        "= Optimizer.zero_grad",
        "Tensor.item (mean loss, non-finite check)",
    ],
    "local > training_step": ["= model forward (Module.__call__)", "= F.cross_entropy", "training_step > self.log"],
}


def fedhet_targets() -> list[Target]:
    """What to time on the fedhet side: (owner, attribute, label, kind)."""
    import fedhet.plugins.clients.context as context
    import fedhet.plugins.clients.local_loop as local_loop
    import fedhet.plugins.rounds.trainer as trainer
    import fedhet.plugins.uploads.policies as policies
    from fedhet.core import ClientState, ClientUpdate, ServerState
    from fedhet.datamodules import ClientDataModule
    from fedhet.datamodules.tensor_dataset import TensorBatchLoader
    from fedhet.modules.base import FederatedModule
    from fedhet.modules.classifier import FederatedClassifier
    from fedhet.plugins import FullParticipation, SequentialRunner, WeightedMean
    from fedhet.plugins.clients.slots import ModuleSlot
    from fedhet.plugins.hooks.dispatch import CallbackHooks

    ft = trainer.FederatedTrainer
    cc = context.ClientContext
    return [
        # per round
        (FullParticipation, "sample", "_run_round > sampler.sample (per round)", "call"),
        (trainer, "gather_objects", "_run_round > gather_objects (per round)", "call"),
        (policies.FailureBudget, "check", "_run_round > FailureBudget.check (per round)", "call"),
        (WeightedMean, "compute", "_run_round > WeightedMean.compute (per round)", "call"),
        (WeightedMean, "reset", "_run_round > WeightedMean.reset (per round)", "call"),
        # per client, in _run_round
        (ft, "owns", "_run_round > owns", "call"),
        (cc, "start", FIT_CLIENT, "call"),
        (SequentialRunner, "submit", FIT_CLIENT, "call"),
        (policies, "non_finite", "client > admit > non_finite", "call"),
        (WeightedMean, "update", "_run_round > WeightedMean.update", "call"),
        # one client: ClientContext.start, then SequentialRunner.submit (train, finish)
        (cc, "load", "client > load", "call"),
        (cc, "slot", "load > slot", "call"),
        (FederatedModule, "setup_client", "load > setup_client", "call"),
        (ServerState, "payload_for", "load > payload_for", "call"),
        (ModuleSlot, "load", "load > ModuleSlot.load", "call"),
        (context, "num_bytes", "load > num_bytes (x2)", "call"),
        (context, "move_data_to_device", "move_data_to_device (statistics, optimizer state)", "call"),
        (context, "derive_seed", "client > derive_seed", "call"),
        (context, "seeded", "client > seeded", "context"),
        (ClientDataModule, "train_dataloader", "client > train_dataloader()", "call"),
        (FederatedModule, "local_phases", "client > local_phases()", "call"),
        (context, "run_local_training", LOCAL, "call"),
        (ModuleSlot, "optimizers", "client > ModuleSlot.optimizers", "call"),
        (ModuleSlot, "tensors", "client > ModuleSlot.tensors", "call"),
        (ModuleSlot, "refresh", "tensors > ModuleSlot.refresh (a tensor was replaced)", "call"),
        (context, "to_cpu", "client > to_cpu (x3)", "call"),
        (FederatedModule, "client_statistics", "client > client_statistics()", "call"),
        (ClientUpdate, "__init__", "client > ClientUpdate()", "call"),
        (ClientState, "__init__", "client > ClientState()", "call"),
        (CallbackHooks, "__call__", "CallbackHooks (x2 per client)", "call"),
        # run_local_training
        (FederatedClassifier, "configure_optimizers", "optimizers > configure_optimizers()", "call"),
        (nn.Module, "train", "local > module.train()", "call"),
        (FederatedModule, "on_train_start", "local > on_train_start", "call"),
        (FederatedModule, "set_local_phase", "local > set_local_phase (x2, + 1 in on_train_end)", "call"),
        (FederatedModule, "on_train_end", "local > on_train_end (incl. its set_local_phase)", "call"),
        (local_loop, "_batches", "local > batches (_batches next, incl. StopIteration)", "iter"),
        (TensorBatchLoader, "__iter__", "batches > TensorBatchLoader next", "iter"),
        (FederatedClassifier, "training_step", "local > training_step", "call"),
        (FederatedModule, "log", "training_step > self.log", "call"),
        (torch.Tensor, "item", "Tensor.item (mean loss, non-finite check)", "call"),
    ]


def shared_targets() -> list[Target]:
    """Primitives timed on both sides."""
    return [
        (nn.Module, "load_state_dict", "= Module.load_state_dict", "call"),
        (torch.optim.SGD, "__init__", "= SGD.__init__", "call"),
        (nn.Module, "__call__", "= model forward (Module.__call__)", "call"),
        (F, "cross_entropy", "= F.cross_entropy", "call"),
        (torch.Tensor, "backward", "= Tensor.backward", "call"),
        (torch.optim.SGD, "step", "= SGD.step", "call"),
        (torch.optim.Optimizer, "zero_grad", "= Optimizer.zero_grad", "call"),
        (nn.Module, "state_dict", "= Module.state_dict", "call"),
        (torch, "randperm", "= torch.randperm", "call"),
        (torch.Tensor, "index_select", "= Tensor.index_select", "call"),
        (torch.Tensor, "copy_", "= Tensor.copy_", "call"),
        (torch.Tensor, "to", "= Tensor.to", "call"),
    ]


Profile = tuple[dict[str, float], dict[str, int], float]


def profile_fedhet(federation: Any, rounds: int) -> Profile:
    """Run ``fit``, timing rounds ``1 .. rounds-2``: seconds and calls by label, and those rounds' seconds."""
    from fedhet.plugins import FederatedTrainer

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


def with_self_rows(profile: Profile) -> Profile:
    """``profile`` plus a ``"<parent> (self)"`` row for each parent of :data:`CHILDREN` it holds."""
    seconds, calls, total = dict(profile[0]), dict(profile[1]), profile[2]
    for parent, children in CHILDREN.items():
        if parent in seconds:
            label = f"{parent} (self)"
            seconds[label] = seconds[parent] - sum(seconds.get(child, 0.0) for child in children)
            calls[label] = calls[parent]
    return seconds, calls, total


def report(fedhet: Profile, reference: Profile, client_rounds: int) -> list[str]:
    """Markdown lines: one row per label, µs and calls per client-round on each side."""
    (f_sec, f_calls, f_total), (r_sec, r_calls, r_total) = with_self_rows(fedhet), reference
    per = 1e6 / client_rounds
    lines = [
        f"Steady-state round per client: fedhet {f_total * per:.0f} µs, reference {r_total * per:.0f} µs"
        f" (ratio {f_total / r_total:.2f}x, difference {(f_total - r_total) * per:.0f} µs).",
        "",
        "Rows starting with `=` are timed on both sides; the others only exist in fedhet. `(self)`: the call less the"
        " timed calls made directly under it.",
        "",
        "| call (inclusive) | fedhet µs/client | calls/client | reference µs/client | calls/client |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = sorted(set(f_sec) | set(r_sec), key=lambda k: (not k.startswith("="), -f_sec.get(k, 0.0)))
    for label in labels:
        cells = [label]
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
    parser.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3")
    torch.set_num_threads(args.threads)
    TIMERS.clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    malloc = heap_setting(True)  # fedhet's default allocator setting, for both sides alike
    federation, clients = make_federation(make_client_tensors(args.clients, args.seed))
    make_trainer(3).fit(make_model(), make_federation(make_client_tensors(8, args.seed))[0])  # warm-up
    TIMERS.cost = timer_cost()
    fedhet, reference = [], []
    for repeat in range(args.repeats):
        for side in ("reference", "fedhet") if repeat % 2 == 0 else ("fedhet", "reference"):
            if side == "fedhet":
                fedhet.append(profile_fedhet(federation, args.rounds))
            else:
                reference.append(profile_reference(clients, args.rounds))
        print(f"repeat {repeat + 1}/{args.repeats}: fedhet {fedhet[-1][2]:.2f} s, reference {reference[-1][2]:.2f} s")
    client_rounds = args.clients * (args.rounds - 2)
    lines = [
        f"# Engine overhead profile: {args.clients} clients, rounds 1..{args.rounds - 2} of {args.rounds},"
        f" {args.threads} thread(s), {args.clock} time",
        "",
        f"Written by `{' '.join(['python', *sys.argv])}`. Medians over {args.repeats} interleaved runs of each side."
        f" A timer costs its caller {TIMERS.cost * 1e6:.2f} µs, taken off the times of the calls around it; rows"
        " nest (see the labels), so they do not add up.",
        "",
        *report(median_profile(fedhet), median_profile(reference), client_rounds),
        "",
        *(f"- {key}: `{value}`" for key, value in {**environment(args.seed), "malloc": malloc}.items()),
        "",
    ]
    print("\n".join(lines))
    if not args.no_save:
        args.output_dir.mkdir(parents=True, exist_ok=True)
        (args.output_dir / "engine_overhead_profile.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
