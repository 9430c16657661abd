"""Scale: rounds per second and peak memory of FedRep on 10 to 10,000 small tabular clients, sampling 10% per round.

What runs:
    ``FederatedTrainer.fit(FedRep(hidden_dims=[64]), federation)`` on CPU with ``UniformSampler(fraction)`` (10% of
    the clients per round by default), no logger, progress display or checkpoints, evaluation only after the last
    round. FedRep keeps a **personal head** per client (``Linear(64, 10)``, 650 floats, 2.6 kB), so the engine's
    client state store grows with every client that has taken part; that is the memory a federation must hold. The
    clients are synthetic (16 standard-normal features, 10 classes, 20-40 training samples and 8 validation samples
    each, labelled by the arg-max of one fixed random linear map, one seeded generator), so the data's own size is
    known.

How it is measured:
    Each configuration runs in a fresh Python process (so that peak RSS is its own). In it: RSS after the imports and
    a 2-round warm-up on 8 clients (``base``), RSS after the federation's tensors are built (``data``), the largest
    RSS seen at the end of any training round (``train peak``, read from ``/proc/self/statm`` by a callback, with the
    number of client states and the bytes of those held in memory at that moment) and the
    process's peak RSS over the whole run including the final evaluation of every client (``ru_maxrss``). Rounds per
    second come from the engine's own ``time/round_s`` of rounds ``1 .. R-2`` (round 0 creates the first clients'
    states, the last evaluates). ``engine`` is ``train peak - data - state in memory``: what the engine holds beyond
    the data and the clients' personal states; it should not grow with the number of clients. RSS moves by whole
    pages and with the memory the allocator keeps or returns, so that difference is only good to a few MB (it went
    negative on earlier runs). ``engine heap`` is the same difference taken from the C heap's bytes in use (glibc's
    ``mallinfo2``, read at the same moments; the peak is the largest reading), which holds every torch CPU tensor
    and every Python object over 512 B exactly; Python's small objects (pymalloc arenas) are not in it.

    With ``--budget-mb``, the largest federation runs a second time with ``client_state_budget_mb`` set: states beyond
    the budget spill to disk, so the state held in memory stays under the budget whatever the number of clients.
    With ``--stack N`` (64 by default, 0 for none) it runs a third time with ``stack_clients=N``: the sampled clients
    train in stacks of up to ``N`` with ``torch.func`` (``fedhet.plugins.clients.stacked``).

Usage::

    python benchmarks/scale.py                                  # 10, 100, 1,000, 10,000 clients (about 5 min)
    python benchmarks/scale.py --clients 100 1000 --rounds 8 --budget-mb 1

Results go to ``benchmarks/results/scale.csv`` and ``.md``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import logging
import resource
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

NUM_FEATURES, NUM_CLASSES, HIDDEN = 16, 10, 64
MIN_SAMPLES, MAX_SAMPLES, NUM_VAL = 20, 40, 8
PAGE_MB = resource.getpagesize() / 2**20

COLUMNS = {
    "clients": "clients",
    "stack": "stack_clients",
    "budget_mb": "state budget MB",
    "rounds_per_s": "rounds/s",
    "clients_per_s": "clients trained/s",
    "states": "client states at train peak",
    "state_memory_mb": "state in memory MB",
    "spilled": "states on disk",
    "base_mb": "base RSS MB",
    "data_mb": "data MB",
    "train_peak_mb": "train peak RSS MB",
    "engine_mb": "engine MB (RSS)",
    "data_heap_mb": "data heap MB",
    "engine_heap_mb": "engine heap MB",
    "peak_mb": "peak RSS MB (with eval)",
    "fit_s": "fit s",
}


def rss_mb() -> float:
    """Resident set size of this process now, in MiB."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE_MB


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    ] + [("keepcost", ctypes.c_size_t)]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    """The C library's ``mallinfo2`` (glibc >= 2.33), or ``None`` where there is none."""
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function


_MALLINFO2 = _mallinfo2()


def heap_mb() -> float:
    """Bytes in use on the C heap (``malloc``: every torch CPU tensor, Python objects over 512 B), in MiB.

    Exact to the byte and unaffected by pages the allocator keeps or returns, unlike RSS; ``nan`` without glibc's
    ``mallinfo2``.
    """
    if _MALLINFO2 is None:
        return float("nan")
    info = _MALLINFO2()
    return (info.uordblks + info.hblkhd) / 2**20


def make_federation(num_clients: int, seed: int = 0):
    """``num_clients`` synthetic tabular clients (see the module docstring), set up."""
    from fedhet.datamodules import FederatedDataModule

    gen = torch.Generator().manual_seed(seed)
    teacher = torch.randn(NUM_FEATURES, NUM_CLASSES, generator=gen)  # labels are learnable: argmax of a linear map
    width = len(str(num_clients - 1))
    tensors = {}
    for i in range(num_clients):
        n = int(torch.randint(MIN_SAMPLES, MAX_SAMPLES + 1, (), generator=gen)) + NUM_VAL
        x = torch.randn(n, NUM_FEATURES, generator=gen)
        tensors[f"client_{i:0{width}d}"] = (x, (x @ teacher).argmax(1))
    federation = FederatedDataModule.from_tensors(
        tensors, num_classes=NUM_CLASSES, batch_size=32, val_fraction=NUM_VAL / (MIN_SAMPLES + NUM_VAL)
    )
    federation.setup("fit")
    return federation


class _RssProbe:
    """Largest RSS at the end of a training round (before evaluation), and the client state in memory then."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self.state_mb = 0.0
        self.states = 0
        self.heap_mb = 0.0
        self.heap_state_mb = 0.0

    def on_aggregate_end(self, trainer) -> None:
        rss, heap = rss_mb(), heap_mb()
        store = trainer.store
        if rss >= self.peak_mb:
            self.peak_mb, self.states, self.state_mb = rss, len(store), self._state_mb(store)
        if heap >= self.heap_mb:
            self.heap_mb, self.heap_state_mb = heap, self._state_mb(store)

    @staticmethod
    def _state_mb(store) -> float:
        in_memory = list(store.in_memory().values())
        tensors = [t for state in in_memory for t in state.personal.values()]
        return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def run_one(
    num_clients: int, rounds: int, fraction: float, budget_mb: float | None, stack: int | None, root: Path
) -> dict:
    """One configuration in this process; returns its measurements."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import quiet_trainer
    from fedhet.modules import FedRep
    from fedhet.plugins import ClientStates, UniformSampler

    torch.set_num_threads(1)
    logging.getLogger("lightning").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    quiet_trainer(2, root=root / "warmup").fit(FedRep(hidden_dims=[HIDDEN]), make_federation(8))
    base, base_heap = rss_mb(), heap_mb()
    federation = make_federation(num_clients)
    data, data_heap = rss_mb() - base, heap_mb() - base_heap
    probe = _RssProbe()
    trainer = quiet_trainer(
        rounds,
        root=root / f"n{num_clients}",
        sampler=UniformSampler(fraction, min_clients=1),
        callbacks=[probe],
        client_state=ClientStates(budget_mb=budget_mb),
        stack_clients=stack,
    )
    start = time.perf_counter()
    trainer.fit(FedRep(hidden_dims=[HIDDEN]), federation)
    fit_s = time.perf_counter() - start
    steady = [h["time/round_s"] for h in trainer.history[1:-1]]
    participants = [h["clients/participants"] for h in trainer.history[1:-1]]
    store = trainer.store
    return {
        "clients": num_clients,
        "stack": "none" if stack is None else stack,
        "budget_mb": "none" if budget_mb is None else budget_mb,
        "rounds": rounds,
        "rounds_per_s": round(len(steady) / sum(steady), 3),
        "clients_per_s": round(sum(participants) / sum(steady), 1),
        "states": probe.states,
        "state_memory_mb": round(probe.state_mb, 2),
        "spilled": store.num_spilled,
        "base_mb": round(base, 1),
        "data_mb": round(data, 1),
        "train_peak_mb": round(probe.peak_mb, 1),
        "engine_mb": round(probe.peak_mb - base - data - probe.state_mb, 1),
        "data_heap_mb": round(data_heap, 2),
        "engine_heap_mb": round(probe.heap_mb - base_heap - data_heap - probe.heap_state_mb, 2),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "fit_s": round(fit_s, 1),
        "val_acc_mean": round(trainer.history[-1].get("val/acc_mean", float("nan")), 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000, 10_000])
    parser.add_argument("--rounds", type=int, default=8, help="rounds per fit (>= 3)")
    parser.add_argument("--fraction", type=float, default=0.1, help="clients sampled per round")
    parser.add_argument("--budget-mb", type=float, default=2.0, help="state budget of the extra spilling run")
    parser.add_argument("--stack", type=int, default=64, help="stack_clients of the extra stacked run (0: none)")
    parser.add_argument("--root", type=Path, default=Path("fedhet_runs/benchmarks/scale"))
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("CLIENTS", "BUDGET", "STACK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # as in every child; the results' footer reports it
    if args.child:
        budget = None if args.child[1] == "none" else float(args.child[1])
        stack = None if args.child[2] == "none" else int(args.child[2])
        print(json.dumps(run_one(int(args.child[0]), args.rounds, args.fraction, budget, stack, args.root)))
        return
    largest = max(args.clients)
    configs = [(n, "none", "none") for n in args.clients] + [(largest, str(args.budget_mb), "none")]
    if args.stack:
        configs.append((largest, "none", str(args.stack)))
    rows = []
    for clients, budget, stack in configs:
        command = [sys.executable, __file__, "--child", str(clients), budget, stack, "--rounds", str(args.rounds)]
        command += ["--fraction", str(args.fraction), "--root", str(args.root)]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    if not args.no_save:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _common import environment, write_table

        notes = [
            f"Written by `benchmarks/scale.py` (its docstring explains the method). FedRep, {args.rounds} rounds,"
            f" {args.fraction:.0%} of the clients per round, rounds/s over rounds 1..R-2; each row a fresh process.",
            "`engine` = train peak RSS - base - data - client state in memory (RSS moves by whole pages and with what"
            " the allocator keeps, so a few MB either way is noise). `engine heap` = the same from the C heap's bytes"
            " in use (glibc `mallinfo2`: every torch tensor, Python objects over 512 B), exact to the byte.",
            "The machine (2 cores) was shared with other jobs: rates are indicative, memory is not affected.",
        ]
        print(write_table("scale", "Scale: FedRep on many small clients", rows, COLUMNS, notes, environment()))


if __name__ == "__main__":
    main()
