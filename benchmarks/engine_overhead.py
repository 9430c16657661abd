"""Engine overhead: seconds per FedAvg round in fedhet against a bare PyTorch loop doing the same optimizer steps.

What is compared:
    * **fedhet**: ``FederatedTrainer.fit(FedAvg(hidden_dims=[64], lr=0.05), federation)`` on CPU, with every optional
      feature that costs time switched off (no logger, no progress bar, no checkpoints, no per-client logging) and
      ``eval_every`` larger than ``rounds``, so that clients are evaluated only after the last round. One small
      callback reads the process CPU clock at each round's start and end and adds up the steps the clients report
      (one hook per round).
    * **fedhet stacked**: the same ``fit`` with ``stack_clients=--stack`` (default 64): the clients of a round train
      in stacks of up to that many at once (``fedhet.plugins.clients.stacked``, ``torch.func.vmap``), grouped by their
      number of steps (2, 3 or 4 here), with the same batches as the sequential path.
    * **reference**: the least work any FedAvg must do, written in plain PyTorch in the same process as a strong
      engineer would write it. One ``nn.Module`` of the same architecture (flatten, ``Linear(32, 64)``, ReLU,
      ``Linear(64, 10)``, with the same parameter names) and one ``torch.optim.SGD`` serve every client (plain SGD
      keeps no state, so reusing it changes nothing). For each round and each client: the global weights are copied
      into the parameters in place (``Tensor.copy_``, no ``load_state_dict``), one epoch of shuffled minibatches
      (``randperm`` and ``index_select``) of the same batch size, so exactly the ``ceil(n_i / batch_size)`` steps
      fedhet's training loader gives (its last batch may be smaller), each a forward, cross-entropy, backward and
      step; then the parameters are added in place, weighted by the client's number of samples, into running sums
      that become the next global weights.
    * **vmap reference** (the stacked side's reference): the same FedAvg in plain PyTorch with the clients trained
      ``--stack`` at a time, as a strong engineer would vectorise it: clients with the same number of steps are
      grouped in client order, each client's shuffled samples are laid out once in zero-padded ``(steps * batch)``
      rows, and each step is one ``torch.func.vmap`` of ``functional_call`` over the group's stacked parameters
      (masked mean loss per client, one backward of their sum, one SGD step on the stacked leaves).

    Both sides train on the very same tensors (the reference reads them back from the set-up datamodule). The
    shuffled orders differ (fedhet seeds each client's order per round), which changes the numbers but not the
    work. The script checks that the two networks have the same parameter names and shapes, and that every run of
    either side takes the same number of optimizer steps per round; it raises otherwise, so a ratio never compares
    different work.

The workloads (``--workload``):
    * ``tiny`` (default; framework overhead): synthetic tabular clients, 32 standard-normal features, 10 classes, a
      uniformly drawn 50-100 training samples each (so 2-4 steps of batch size 32 per client and round), no
      validation or test split, all drawn from one seeded generator; ``FedAvg(hidden_dims=[64], lr=0.05)``. A
      client's compute is about a millisecond, so the ratio measures the engine's cost per client.
    * ``cnn`` (realistic): the FedPAC paper's Fashion-MNIST recipe (Xu, Tong & Huang, ICLR 2023) on synthetic
      standard-normal 1 x 28 x 28 images: 600 training samples per client, its CNN (``FedAvg(network="cnn")``;
      the reference builds the same layers from ``fedhet.modules.image_cnns.cnn28_body``), E = 5 epochs of batch 50
      (60 steps per client and round), SGD lr 0.01, momentum 0.5, weight decay 5e-4; the reference clears its one
      optimizer's momenta before each client (fedhet gives each client a fresh optimizer state). No stacked side
      (the vmap reference trains one epoch). Results go to ``engine_overhead_cnn.{csv,md}``.
    * ``mlp`` (realistic, small): the recipe of ``configs/fedavg/mnist5k_dominant.yaml`` (``processes.py``'s
      federation) on synthetic standard-normal 784-feature samples: 126 training samples per client (that config's
      180 less its validation and test splits), ``FedAvg(hidden_dims=[200], lr=0.05, momentum=0.5)``, E = 5 epochs of
      batch 50 (15 steps per client and round, a few milliseconds): a round cheap enough for 1,000 clients. No
      stacked side. Results go to ``engine_overhead_mlp.{csv,md}``.
    The same federation serves both sides and every repeat.

How time is measured:
    Seconds per **steady-state round**. For fedhet these are the engine's own ``trainer.history[i]["time/round_s"]``
    (a ``perf_counter`` span around sampling, every client's load/train/upload, aggregation and the round's metrics);
    for the reference, a ``perf_counter`` span around the same work. Round 0 is left out on both sides (fedhet builds
    each client's initial state there, the reference warms up its allocations), and so is the last round (fedhet
    evaluates there); rounds ``1 .. R-2`` count. Whole ``fit`` calls are not timed for the ratio: they add one-off
    costs (Fabric launch, the first-round client builds, the final evaluation) that do not scale with the number of
    rounds; round 0's time is shown beside the ratio, and the CSV also has the last round and the whole ``fit``.

    The machine may be noisy (other jobs), so the sides are interleaved: each repeat runs the reference, fedhet, the
    vmap reference and fedhet stacked back to back, rotating which goes first, after a ``gc.collect()``. A run's time
    is the median of its steady-state rounds; a repeat's ratio is fedhet's run time over the reference's; the
    headline is the median of the repeats' ratios, with their range. The stacked side gets the same ratio against the
    vmap reference, and a speed-up: the sequential run's time over the stacked run's in the same repeat. The same
    ratios computed from process CPU time
    (``time.process_time``, which other processes on the machine do not inflate) are given as a cross-check. Absolute
    times depend on the machine; the ratio is the number to track (target <= 1.10x).
    ``torch.set_num_threads(--threads)`` (default 1) keeps the numbers stable. Nothing is asserted.

    Both sides run under the same C allocator settings, set before either runs: by default glibc keeps freed memory
    in the heap (fedhet's ``retain_cpu_heap``, :mod:`fedhet.plugins.processes.heap`); ``--system-malloc`` leaves glibc's
    own thresholds for both (and ``retain_cpu_heap=False``). With glibc's own, the CNN workload's steps fault pages in
    again after every trim of the heap (up to 1,400 faults per step) and the two sides' times depend on each one's
    allocation history more than on their work; the results footer says which setting ran.
    ``engine_overhead_profile.py`` breaks fedhet's time down by call.

Usage:
    From the repository root::

        python benchmarks/engine_overhead.py                      # 10, 100 and 1,000 clients
        python benchmarks/engine_overhead.py --with-10k           # also 10,000 clients (long: about half an hour)
        python benchmarks/engine_overhead.py --clients 100 --rounds 20 --repeats 5 --threads 1
        python benchmarks/engine_overhead.py --stack 0            # without the stacked column
        python benchmarks/engine_overhead.py --workload cnn --clients 10 20 --rounds 4   # the realistic workload

    Results go to ``benchmarks/results/engine_overhead.csv`` and ``.md`` (``engine_overhead_cnn.*`` for ``cnn``;
    ``_system_malloc`` appended with ``--system-malloc``).
    To profile one side only, e.g. with py-spy::

        py-spy record -o fedhet.svg -- python benchmarks/engine_overhead.py --clients 1000 --only fedhet --no-save
"""

from __future__ import annotations

import argparse
import csv
import gc
import logging
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from _common import RESULTS_DIR, environment
from fedhet.plugins import Processes
from fedhet.plugins.processes.heap import retain_freed_memory

NUM_CLASSES = 10


@dataclass(frozen=True)
class Workload:
    """What each client trains on and with: its samples, network, batch size, optimiser and local epochs.

    Attributes:
        name: ``tiny`` (framework overhead), ``mlp`` or ``cnn`` (realistic rounds).
        input_shape: shape of one sample.
        samples: the fewest and most training samples of a client (drawn uniformly between them).
        batch_size: samples per step.
        lr, momentum, weight_decay: the SGD of both sides.
        local_epochs: passes over a client's samples per round.
        network: ``FedAvg(network=...)``: ``"mlp"`` (``hidden_dims=[hidden]``) or ``"cnn"`` (the paper's CNN).
        hidden: the MLP's hidden width (``network="mlp"``).
        text: what the results file says of the workload.

    """

    name: str
    input_shape: tuple[int, ...]
    samples: tuple[int, int]
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    local_epochs: int
    network: str
    hidden: int
    text: str


WORKLOADS = {
    # 2-4 steps of a 32-64-10 MLP per client and round: what the engine costs per client, not a realistic round
    "tiny": Workload(
        "tiny",
        (32,),
        (50, 100),
        32,
        0.05,
        0.0,
        0.0,
        1,
        "mlp",
        64,
        "synthetic tabular clients of 50-100 samples, 32 features, 10 classes; a 32-64-10 MLP, one epoch of batch 32"
        " (2-4 SGD steps, lr 0.05) per client and round: a client's compute is about a millisecond, so the ratio is"
        " what the engine costs per client (framework overhead), not what a realistic round costs.",
    ),  # fmt: skip
    # configs/fedavg/mnist5k_dominant.yaml's recipe: 126 training samples, MLP 784-200-10, E = 5, batch 50
    "mlp": Workload(
        "mlp",
        (784,),
        (126, 126),
        50,
        0.05,
        0.5,
        0.0,
        5,
        "mlp",
        200,
        "the recipe of `configs/fedavg/mnist5k_dominant.yaml` on synthetic 784-feature samples: 126 training samples"
        " per client, a 784-200-10 MLP, E = 5 epochs of batch 50 (15 SGD steps, lr 0.05, momentum 0.5) per client"
        " and round: a realistic small client round of a few milliseconds.",
    ),  # fmt: skip
    # the FedPAC paper's Fashion-MNIST recipe (Xu, Tong & Huang, ICLR 2023): its CNN on 28 x 28 images, 600 training
    # samples per client, batch 50, E = 5, SGD lr 0.01, momentum 0.5, weight decay 5e-4 (60 steps per client)
    "cnn": Workload(
        "cnn",
        (1, 28, 28),
        (600, 600),
        50,
        0.01,
        0.5,
        5e-4,
        5,
        "cnn",
        0,
        "the FedPAC paper's Fashion-MNIST recipe on synthetic 1 x 28 x 28 images: 600 training samples per client,"
        " its CNN (`FedAvg(network='cnn')`), E = 5 epochs of batch 50 (60 SGD steps, lr 0.01, momentum 0.5, weight"
        " decay 5e-4) per client and round: a realistic client round of a few hundred milliseconds.",
    ),  # fmt: skip
}


# --------------------------------------------------------------------------------------------------------- the data
def make_client_tensors(
    num_clients: int, seed: int, workload: Workload = WORKLOADS["tiny"]
) -> dict[str, tuple[Tensor, Tensor]]:
    """Synthetic clients: ``client_id -> (x, y)``, standard-normal samples of the workload's shape, 10 classes."""
    gen = torch.Generator().manual_seed(seed)
    low, high = workload.samples
    sizes = torch.randint(low, high + 1, (num_clients,), generator=gen).tolist()
    width = len(str(num_clients - 1))
    return {
        f"client_{i:0{width}d}": (
            torch.randn(n, *workload.input_shape, generator=gen),
            torch.randint(0, NUM_CLASSES, (n,), generator=gen),
        )
        for i, n in enumerate(sizes)
    }


def make_federation(tensors: dict[str, tuple[Tensor, Tensor]], workload: Workload = WORKLOADS["tiny"]):
    """The fedhet federation over ``tensors``, set up, and the training tensors it holds, in client order."""
    from fedhet.datamodules import FederatedDataModule

    federation = FederatedDataModule.from_tensors(tensors, num_classes=NUM_CLASSES, batch_size=workload.batch_size)
    federation.setup("fit")
    train = [(c.train_dataset.x, c.train_dataset.y) for c in federation.clients.values()]
    return federation, train


# ---------------------------------------------------------------------------------------------------- the reference
class ReferenceNet(nn.Module):
    """FedAvg's network for the workload in plain PyTorch, with the same parameter names.

    ``tiny`` and ``mlp``: flatten, ``Linear(d, hidden)``, ReLU, ``Linear(hidden, 10)``; ``cnn``: the FedPAC paper's
    CNN body (``fedhet.modules.image_cnns.cnn28_body``, plain ``nn`` layers) and a linear head.
    """

    def __init__(self, workload: Workload) -> None:
        super().__init__()
        if workload.network == "cnn":
            from fedhet.modules.image_cnns import FEATURE_DIM, cnn28_body

            self.body: nn.Module = cnn28_body(workload.input_shape[0])
            self.head = nn.Linear(FEATURE_DIM, NUM_CLASSES)
        else:
            self.body = nn.Sequential(nn.Flatten(), nn.Linear(workload.input_shape[0], workload.hidden), nn.ReLU())
            self.head = nn.Linear(workload.hidden, NUM_CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        """Class logits."""
        return self.head(self.body(x))


def reference_optimizer(params: list[Tensor], workload: Workload) -> torch.optim.SGD:
    """The workload's SGD over ``params`` (fedhet's ``FedAvg.configure_optimizers`` builds the same)."""
    return torch.optim.SGD(params, lr=workload.lr, momentum=workload.momentum, weight_decay=workload.weight_decay)


@dataclass
class Run:
    """One run of either side: each round's wall-clock and process-CPU seconds, and the steps of its last round."""

    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    steps: int = 0
    fit_s: float = float("nan")  # fedhet: the whole fit call


def run_reference(
    clients: list[tuple[Tensor, Tensor]],
    rounds: int,
    seed: int,
    round_hook: Callable[[int], None] | None = None,
    workload: Workload = WORKLOADS["tiny"],
) -> Run:
    """Bare FedAvg over ``clients`` for ``rounds`` rounds.

    ``round_hook(round_idx)``, if given, is called before each round, outside the timed span (for profiling).
    """
    torch.manual_seed(seed)
    model = ReferenceNet(workload)
    params = list(model.parameters())  # these networks have no buffers: their parameters are their whole state
    global_state = [p.detach().clone() for p in params]
    optimizer = reference_optimizer(params, workload)  # one optimizer, its state (momenta) cleared per client
    batch_size = workload.batch_size
    run = Run()
    for round_idx in range(rounds):
        if round_hook is not None:
            round_hook(round_idx)
        start, start_cpu = time.perf_counter(), time.process_time()
        sums = [torch.zeros_like(value) for value in global_state]
        total, steps = 0, 0
        for x, y in clients:
            with torch.no_grad():
                for param, value in zip(params, global_state, strict=True):
                    param.copy_(value)
            optimizer.state.clear()  # no-op for plain SGD; a new client's momenta otherwise
            n = len(y)
            for _ in range(workload.local_epochs):
                steps += train_epoch(model, optimizer, x, y, batch_size)
            with torch.no_grad():
                for acc, param in zip(sums, params, strict=True):
                    acc.add_(param, alpha=n)
            total += n
        global_state = [value / total for value in sums]
        run.cpu_s.append(time.process_time() - start_cpu)
        run.wall_s.append(time.perf_counter() - start)
        run.steps = steps
    return run


def train_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, batch_size: int) -> int:
    """One epoch of shuffled minibatches of ``(x, y)``; the number of steps, ``ceil(len(y) / batch_size)``.

    One ``randperm``, then for each batch two ``index_select``, a forward, a cross-entropy, a backward and a step.
    """
    n = len(y)
    order = torch.randperm(n)
    for begin in range(0, n, batch_size):
        index = order[begin : begin + batch_size]
        loss = F.cross_entropy(model(x.index_select(0, index)), y.index_select(0, index))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return -(-n // batch_size)


def _per_sample_losses(model: nn.Module, params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
    """One client's per-sample cross-entropy with its own parameters (vmapped over the clients)."""
    return F.cross_entropy(functional_call(model, params, (x,)), y, reduction="none")


def run_vmap_reference(
    clients: list[tuple[Tensor, Tensor]], rounds: int, seed: int, stack: int, workload: Workload = WORKLOADS["tiny"]
) -> Run:
    """Bare FedAvg over ``clients`` with the clients trained ``stack`` at a time under ``torch.func.vmap``.

    What a strong engineer would write for many small clients in plain PyTorch: clients that take the same number of
    steps are grouped (in client order, up to ``stack`` per group, as fedhet's stacked path groups them), each
    client's shuffled samples are laid out once as ``(steps, batch)`` rows zero-padded at the end, and each step
    is one ``vmap`` of ``functional_call`` over the group's stacked parameters, a masked mean loss per client, one
    ``backward`` of their sum and one SGD step on the stacked leaves (plain SGD is element-wise, so this is one
    optimizer per client). The trained stacks are summed into the next global weights, weighted by sample counts.
    """
    torch.manual_seed(seed)
    model = ReferenceNet(workload)
    names = [name for name, _ in model.named_parameters()]
    global_state = [p.detach().clone() for p in model.parameters()]
    losses = vmap(partial(_per_sample_losses, model))
    run = Run()
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        sums = [torch.zeros_like(value) for value in global_state]
        groups: dict[int, list[tuple[Tensor, Tensor]]] = {}
        total, steps = 0, 0
        for x, y in clients:
            n = len(y)
            num_steps = -(-n // workload.batch_size)
            order = torch.randperm(n)
            groups.setdefault(num_steps, []).append((x.index_select(0, order), y.index_select(0, order)))
            if len(groups[num_steps]) == stack:
                steps += _train_vmap_group(
                    losses, names, global_state, groups.pop(num_steps), num_steps, sums, workload
                )
            total += n
        for num_steps, group in groups.items():
            steps += _train_vmap_group(losses, names, global_state, group, num_steps, sums, workload)
        global_state = [value / total for value in sums]
        run.cpu_s.append(time.process_time() - start_cpu)
        run.wall_s.append(time.perf_counter() - start)
        run.steps = steps
    return run


def _train_vmap_group(
    losses: Callable[..., Tensor],
    names: list[str],
    global_state: list[Tensor],
    group: list[tuple[Tensor, Tensor]],
    num_steps: int,
    sums: list[Tensor],
    workload: Workload,
) -> int:
    """Train one group of shuffled clients with ``num_steps`` steps each at once (one epoch); add them into ``sums``."""
    batch_size = workload.batch_size
    k, rows = len(group), num_steps * batch_size
    x = torch.zeros(k, rows, *workload.input_shape)
    y = torch.zeros(k, rows, dtype=torch.long)
    mask = torch.zeros(k, rows)
    counts = torch.tensor([len(yk) for _, yk in group], dtype=torch.float32)
    for i, (xk, yk) in enumerate(group):
        x[i, : len(yk)], y[i, : len(yk)], mask[i, : len(yk)] = xk, yk, 1.0
    leaves = [value.expand(k, *value.shape).clone().requires_grad_(True) for value in global_state]
    optimizer = reference_optimizer(leaves, workload)  # element-wise: one optimizer per client
    longest = int(counts.max())
    for step in range(num_steps):  # the last step is as wide as the group's longest last batch
        rows_of_step = slice(step * batch_size, min((step + 1) * batch_size, longest))
        batch_mask = mask[:, rows_of_step]
        per_sample = losses(dict(zip(names, leaves, strict=True)), x[:, rows_of_step], y[:, rows_of_step])
        loss = ((per_sample * batch_mask).sum(1) / batch_mask.sum(1)).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        for acc, leaf in zip(sums, leaves, strict=True):
            acc.add_(torch.tensordot(counts, leaf, dims=1))
    return k * num_steps


# ------------------------------------------------------------------------------------------------------- fedhet side
def make_trainer(
    rounds: int,
    callbacks: list | None = None,
    stack_clients: int | None = None,
    workload: Workload = WORKLOADS["tiny"],
    retain_heap: bool = True,
):
    from _common import quiet_trainer

    return quiet_trainer(
        rounds,
        callbacks=callbacks,
        local_epochs=workload.local_epochs,
        processes=Processes(
            accelerator="cpu",
            stack_clients=stack_clients,
            retain_cpu_heap=retain_heap,
            threads=torch.get_num_threads(),  # --threads, as the reference loops run
        ),
    )


def make_model(workload: Workload = WORKLOADS["tiny"]):
    from fedhet.modules.baselines import FedAvg

    return FedAvg(
        hidden_dims=[workload.hidden],
        network=workload.network,
        lr=workload.lr,
        momentum=workload.momentum,
        weight_decay=workload.weight_decay,
    )


class _RoundClock:
    """A federation callback taking each round's process CPU time and counting the steps the clients report."""

    def __init__(self) -> None:
        self.cpu_s: list[float] = []
        self.steps: list[float] = []
        self._start = 0.0

    def on_round_start(self) -> None:
        self._start = time.process_time()

    def on_aggregate_start(self, updates) -> None:
        self.steps.append(sum(update.metrics["steps"] for update in updates))

    def on_round_end(self) -> None:
        self.cpu_s.append(time.process_time() - self._start)


def run_fedhet(
    federation,
    rounds: int,
    stack_clients: int | None = None,
    workload: Workload = WORKLOADS["tiny"],
    retain_heap: bool = True,
) -> Run:
    """One ``fit``: wall seconds per round from the engine's history, CPU seconds from a callback."""
    clock = _RoundClock()
    trainer = make_trainer(rounds, [clock], stack_clients, workload, retain_heap)
    model = make_model(workload)
    start = time.perf_counter()
    trainer.fit(model, federation)
    fit_s = time.perf_counter() - start
    return Run([h["time/round_s"] for h in trainer.history], clock.cpu_s, int(clock.steps[-1]), fit_s)


def check_same_model(federation, workload: Workload) -> None:
    """Untimed: raise if the reference network's parameter names or shapes differ from fedhet's FedAvg."""
    fedhet_model = make_model(workload)
    fedhet_model.setup_client(next(iter(federation.specs.values())))
    fedhet_model.configure_model()
    mine = {k: tuple(v.shape) for k, v in ReferenceNet(workload).state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in fedhet_model.shared_state_dict().items()}
    if mine != theirs:
        raise RuntimeError(f"the reference network {mine} differs from fedhet's {theirs}; fix ReferenceNet")


# ------------------------------------------------------------------------------------------------------ the harness
@dataclass
class Result:
    """The runs for one number of clients, and their summary."""

    clients: int
    rounds: int
    reference: list[Run] = field(default_factory=list)
    fedhet: list[Run] = field(default_factory=list)
    stacked: list[Run] = field(default_factory=list)
    vmap_reference: list[Run] = field(default_factory=list)

    def steady(self, runs: list[Run], clock: str = "wall") -> list[float]:
        """Per run: the median of its steady-state rounds ``1 .. R-2``."""
        return [statistics.median(getattr(run, f"{clock}_s")[1 : self.rounds - 1]) for run in runs]

    def ratios(self, clock: str = "wall", side: str = "fedhet", over: str = "reference") -> list[float]:
        """Per repeat: the ``side`` time over the ``over`` time."""
        pairs = zip(self.steady(getattr(self, side), clock), self.steady(getattr(self, over), clock), strict=True)
        return [mine / theirs for mine, theirs in pairs]

    def row(self) -> dict[str, float | int | str]:
        """The summary row written to the table, CSV and Markdown."""
        ratios, cpu_ratios = self.ratios(), self.ratios("cpu")
        ref, fed = statistics.median(self.steady(self.reference)), statistics.median(self.steady(self.fedhet))
        return {**self._sequential_row(ratios, cpu_ratios, ref, fed), **self._stacked_row(ref)}

    def _stacked_row(self, ref: float) -> dict[str, float]:
        if not self.stacked:
            return {}
        ratios, speedups = self.ratios(side="stacked", over="vmap_reference"), self.ratios(over="stacked")
        stacked = statistics.median(self.steady(self.stacked))
        vmap_ref = statistics.median(self.steady(self.vmap_reference))
        return {
            "stacked_ratio": round(statistics.median(ratios), 3),
            "stacked_ratio_min": round(min(ratios), 3),
            "stacked_ratio_max": round(max(ratios), 3),
            "stacked_cpu_ratio": round(statistics.median(self.ratios("cpu", side="stacked", over="vmap_reference")), 3),
            "vmap_reference_round_s": round(vmap_ref, 5),
            "stacked_round_s": round(stacked, 5),
            "stacked_over_loop_reference": round(statistics.median(self.ratios(side="stacked")), 3),
            "stacked_speedup": round(statistics.median(speedups), 2),
            "stacked_us_per_client": round(stacked / self.clients * 1e6, 1),
            "reference_us_per_client": round(ref / self.clients * 1e6, 1),
        }

    def _sequential_row(
        self, ratios: list[float], cpu_ratios: list[float], ref: float, fed: float
    ) -> dict[str, float | int | str]:
        return {
            "clients": self.clients,
            "rounds": self.rounds,
            "timed_rounds": self.rounds - 2,
            "repeats": len(ratios),
            "steps_per_round": self.reference[0].steps,
            "ratio": round(statistics.median(ratios), 3),
            "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "cpu_ratio": round(statistics.median(cpu_ratios), 3),
            "reference_round_s": round(ref, 5),
            "fedhet_round_s": round(fed, 5),
            "overhead_us_per_client": round((fed - ref) / self.clients * 1e6, 1),
            "fedhet_round0_s": round(statistics.median(run.wall_s[0] for run in self.fedhet), 4),
            "fedhet_last_round_s": round(statistics.median(run.wall_s[-1] for run in self.fedhet), 4),
            "fedhet_fit_s": round(statistics.median(run.fit_s for run in self.fedhet), 3),
        }


def heap_setting(retain: bool) -> str:
    """Put both sides under the same allocator settings from the start; what the results footer says of them.

    fedhet keeps freed memory in the heap on CPU runs (``retain_cpu_heap``, its default): applied here before either
    side runs, so that the reference runs under it too; ``retain=False`` leaves glibc's own thresholds for both.
    """
    if not retain:
        return "glibc's own thresholds for both sides (--system-malloc; fedhet retain_cpu_heap=False)"
    applied = retain_freed_memory()
    return "heap retained for both sides (fedhet's default retain_cpu_heap)" + ("" if applied else ": not glibc, no-op")


def default_rounds(num_clients: int) -> int:
    """Enough steady-state rounds to average over, within a few minutes for the default client counts."""
    return max(4 if num_clients > 1000 else 5, min(30, 1500 // num_clients))


def measure(
    num_clients: int,
    rounds: int,
    repeats: int,
    only: str | None,
    seed: int,
    stack: int,
    workload: Workload,
    retain_heap: bool = True,
) -> Result:
    """Interleaved runs of every side (or of ``only`` one) on one federation; the order rotates between repeats."""
    federation, clients = make_federation(make_client_tensors(num_clients, seed, workload), workload)
    check_same_model(federation, workload)
    result = Result(num_clients, rounds)
    sides = ["reference", "fedhet", "vmap_reference", "stacked"] if stack else ["reference", "fedhet"]
    for repeat in range(repeats):
        for side in sides[repeat % len(sides) :] + sides[: repeat % len(sides)]:
            if only is not None and side != only:
                continue
            gc.collect()
            if side == "reference":
                result.reference.append(run_reference(clients, rounds, seed=repeat, workload=workload))
            elif side == "vmap_reference":
                result.vmap_reference.append(run_vmap_reference(clients, rounds, repeat, stack, workload))
            else:
                stack_clients = stack if side == "stacked" else None
                getattr(result, side).append(run_fedhet(federation, rounds, stack_clients, workload, retain_heap))
        steps = {run.steps for side in sides for run in getattr(result, side)}
        if len(steps) > 1:
            raise RuntimeError(f"{num_clients} clients: the sides took different numbers of steps: {steps}")
        done = [
            f"{side} {statistics.median(run.wall_s[1 : rounds - 1]) * 1e3:.1f} ms/round"
            for side in sides
            for run in getattr(result, side)[-1:]
        ]
        print(f"  repeat {repeat + 1}/{repeats}: {', '.join(done)}", flush=True)
    return result


COLUMNS = {
    "clients": "clients",
    "rounds": "rounds (timed)",
    "steps_per_round": "steps/round",
    "ratio": "ratio",
    "range": "ratio range",
    "cpu_ratio": "CPU-time ratio",
    "reference_round_s": "reference ms/round",
    "fedhet_round_s": "fedhet ms/round",
    "overhead_us_per_client": "overhead µs/client",
    "fedhet_round0_s": "fedhet round 0 ms",
}
STACKED_COLUMNS = {
    "vmap_reference_round_s": "vmap reference ms/round",
    "stacked_round_s": "stacked ms/round",
    "stacked_ratio": "stacked ratio",
    "stacked_range": "stacked ratio range",
    "stacked_cpu_ratio": "stacked CPU-time ratio",
    "stacked_speedup": "stacked speed-up",
    "stacked_over_loop_reference": "stacked / loop reference",
}


def columns(rows: list[dict]) -> dict[str, str]:
    """The table's columns: the stacked side's too when it ran."""
    return {**COLUMNS, **(STACKED_COLUMNS if "stacked_ratio" in rows[0] else {})}


def display(row: dict[str, float | int | str]) -> dict[str, str]:
    """A summary row as table cells: times in ms, the ratio with its range over repeats."""
    cells = {key: str(row.get(key, "")) for key in columns([row])}
    cells["rounds"] = f"{row['rounds']} ({row['timed_rounds']})"
    cells["ratio"] = f"{row['ratio']:.2f}x"
    cells["range"] = f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}x"
    cells["cpu_ratio"] = f"{row['cpu_ratio']:.2f}x"
    for key in ("reference_round_s", "fedhet_round_s", "fedhet_round0_s"):
        cells[key] = f"{float(row[key]) * 1e3:.1f}"
    cells["overhead_us_per_client"] = f"{float(row['overhead_us_per_client']):.0f}"
    if "stacked_ratio" in row:
        cells["stacked_ratio"] = f"{row['stacked_ratio']:.2f}x"
        cells["stacked_range"] = f"{row['stacked_ratio_min']:.2f}-{row['stacked_ratio_max']:.2f}x"
        cells["stacked_cpu_ratio"] = f"{row['stacked_cpu_ratio']:.2f}x"
        cells["stacked_round_s"] = f"{float(row['stacked_round_s']) * 1e3:.1f}"
        cells["vmap_reference_round_s"] = f"{float(row['vmap_reference_round_s']) * 1e3:.1f}"
        cells["stacked_over_loop_reference"] = f"{row['stacked_over_loop_reference']:.2f}x"
        cells["stacked_speedup"] = f"{row['stacked_speedup']:.1f}x"
    return cells


def results_name(workload: Workload, system_malloc: bool = False) -> str:
    """The results files' name: ``engine_overhead`` for the tiny workload, ``engine_overhead_<name>`` otherwise.

    ``_system_malloc`` is appended for a run under glibc's own allocator thresholds.
    """
    name = "engine_overhead" if workload.name == "tiny" else f"engine_overhead_{workload.name}"
    return name + ("_system_malloc" if system_malloc else "")


def write_results(rows: list[dict], env: dict[str, str], out_dir: Path, workload: Workload, name: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / f"{name}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "# Engine overhead: FedAvg seconds per round, fedhet vs bare PyTorch"
        + ("" if workload.name == "tiny" else f" ({workload.name} workload)"),
        "",
        f"Workload `{workload.name}`: {workload.text}",
        "",
        "Written by `benchmarks/engine_overhead.py` (its docstring explains the method). Target: ratio <= 1.10x.",
        "Ratio: median over repeats of (median fedhet steady-state round) / (median reference round); rounds 0 and",
        "R-1 (client set-up, evaluation) are not in it. Overhead: (fedhet - reference) time per round per client.",
        "Reference: one module and one SGD for all clients, weights copied in place (`Tensor.copy_`). Stacked: the",
        "same fit with `stack_clients` (clients trained in stacks with torch.func); its ratio is against the vmap",
        "reference (bare FedAvg with `torch.func.vmap` over groups of clients), its speed-up is the sequential fedhet",
        "time over the stacked time, per repeat, median over repeats. The machine was shared with other jobs.",
        "",
        "| " + " | ".join(columns(rows).values()) + " |",
        "|" + "---|" * len(columns(rows)),
    ]
    lines += ["| " + " | ".join(display(row).values()) + " |" for row in rows]
    lines += ["", *(f"- {key}: `{value}`" for key, value in env.items()), ""]
    (out_dir / f"{name}.md").write_text("\n".join(lines))


def print_table(rows: list[dict]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text
        print(" | ".join(columns(rows).values()))
        for row in rows:
            print(" | ".join(display(row).values()))
        return
    table = Table(title="FedAvg time per round, fedhet / bare PyTorch (target <= 1.10x)")
    for title in columns(rows).values():
        table.add_column(title, justify="right")
    for row in rows:
        table.add_row(*display(row).values())
    Console(width=max(Console().width, 150)).print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000], help="numbers of clients")
    parser.add_argument("--with-10k", action="store_true", help="also run 10,000 clients (about half an hour)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per fit, >= 3 (default: by client count)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats per client count")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    parser.add_argument("--stack", type=int, default=None, help="stack_clients of the stacked side (0: none; tiny: 64)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="tiny", help="see the module docstring")
    parser.add_argument(
        "--only",
        choices=["fedhet", "reference", "stacked", "vmap_reference"],
        default=None,
        help="run one side (for profiling)",
    )
    parser.add_argument(
        "--system-malloc",
        action="store_true",
        help="leave glibc's malloc thresholds as they are for both sides (fedhet: retain_cpu_heap=False)",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.with_10k and 10_000 not in args.clients:
        args.clients.append(10_000)
    if args.rounds is not None and args.rounds < 3:
        parser.error("--rounds must be at least 3: round 0 and the last round are not timed")
    if args.stack is None:
        args.stack = 64 if args.workload == "tiny" else 0
    if args.stack and WORKLOADS[args.workload].local_epochs != 1:
        parser.error(f"--workload {args.workload}: the vmap reference trains one epoch per round; use --stack 0")
    if args.repeats < 1 or args.threads < 1 or min(args.clients) < 1 or args.stack < 0:
        parser.error("--repeats, --threads and --clients must be positive, --stack at least 0")
    if args.only in ("stacked", "vmap_reference") and not args.stack:
        parser.error(f"--only {args.only} needs --stack above 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.getLogger("lightning").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="lightning")
    workload = WORKLOADS[args.workload]
    retain_heap = not args.system_malloc
    malloc = heap_setting(retain_heap)
    # Warm-up, untimed: imports, lazy initialisation and first-call costs of both sides.
    federation, clients = make_federation(make_client_tensors(8 if args.stack else 2, args.seed, workload), workload)
    run_fedhet(federation, 3, workload=workload, retain_heap=retain_heap)
    if args.stack:
        run_fedhet(federation, 3, args.stack, workload, retain_heap)
        run_vmap_reference(clients, 3, args.seed, args.stack, workload)
    run_reference(clients, 3, args.seed, workload=workload)

    rows = []
    for num_clients in args.clients:
        rounds = args.rounds or default_rounds(num_clients)
        print(f"{num_clients} clients, {rounds} rounds, {args.repeats} repeats", flush=True)
        result = measure(num_clients, rounds, args.repeats, args.only, args.seed, args.stack, workload, retain_heap)
        if args.only is None:
            rows.append(result.row())
    if not rows:
        return
    print_table(rows)
    if not args.no_save:
        name = results_name(workload, args.system_malloc)
        config = f"none: the script's built-in synthetic `{workload.name}` workload (WORKLOADS); no config or suite"
        env = {**environment(args.seed, config), "malloc": malloc}
        write_results(rows, env, args.output_dir, workload, name)
        print(f"wrote {args.output_dir / name}.csv and .md")


if __name__ == "__main__":
    main()
