"""Why stacking does not speed the FedPAC paper's CNN on a CPU: one training step of K clients, separate or vmapped.

What is compared:
    The FedPAC paper's Fashion-MNIST network (``fedhet.modules.image_cnns.cnn28_body`` and a linear head to 10
    classes, Xu, Tong & Huang, ICLR 2023) for ``--clients`` K clients, each with its own weights and its own batch of
    ``--batch`` standard-normal 1 x 28 x 28 images:

    * **separate**: K modules, each a forward, a cross-entropy and a backward on its own batch (what the sequential
      path does per step, without the optimizer);
    * **vmap**: one ``torch.func.vmap`` of ``functional_call`` over the K clients' stacked weights, the sum of their
      losses and one backward (what ``stack_clients`` does per step, without the optimizer), the weights stacked as
      the engine stacks them (``fedhet.functional.stack_states``, linear weights by columns).

    Each side runs ``--steps`` timed steps after one untimed step, alternating ``--repeats`` times; the table gives
    the median milliseconds per step of the K clients and, from ``torch.profiler`` over 3 more steps of each side, the
    self CPU time of the convolutions (forward: ``aten::mkldnn_convolution``, backward:
    ``aten::convolution_backward``) and of the whole step. Under ``vmap`` a convolution with per-client weights runs
    as one grouped convolution (K groups), which oneDNN runs more slowly on this CPU than K separate ones; the
    separate steps are compute-bound, so stacking has little Python time to save. Nothing is asserted.

Usage::

    python benchmarks/stacked_cnn_step.py                     # 20 clients, batch 50 (the paper's federation)
    python benchmarks/stacked_cnn_step.py --clients 64 --batch 10 --threads 2

Results go to ``benchmarks/results/stacked_cnn_step.{csv,md}``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from torch.profiler import profile

from _common import environment, write_table
from fedhet.functional import stack_states
from fedhet.modules.image_cnns import FEATURE_DIM, cnn28_body

COLUMNS = {
    "side": "side",
    "clients": "clients",
    "batch": "batch",
    "ms_per_step": "ms per step (all clients)",
    "ratio": "vs separate",
    "conv_forward_ms": "conv forward ms",
    "conv_backward_ms": "conv backward ms",
    "profiled_ms": "profiled step ms",
}
_FORWARD, _BACKWARD = "aten::mkldnn_convolution", "aten::convolution_backward"


def make_sides(clients: int, batch: int, seed: int) -> dict[str, Callable[[], None]]:
    """The two ways of taking one step of ``clients`` clients, on the same weights and batches."""
    torch.manual_seed(seed)
    net = nn.Sequential(cnn28_body(1), nn.Linear(FEATURE_DIM, 10))
    nets = [copy.deepcopy(net) for _ in range(clients)]
    linear = [f"{prefix}.weight" for prefix, layer in net.named_modules() if isinstance(layer, nn.Linear)]
    states = [{name: p.detach() for name, p in n.named_parameters()} for n in nets]
    # laid out as the engine's stacked path lays them out (linear weights by columns)
    stacked = {name: leaf.requires_grad_() for name, leaf in stack_states(states, by_columns=linear).items()}
    x = torch.randn(clients, batch, 1, 28, 28)
    y = torch.randint(0, 10, (clients, batch))

    def one_loss(params: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(net, params, (xb,)), yb)

    def separate() -> None:
        for k, module in enumerate(nets):
            F.cross_entropy(module(x[k]), y[k]).backward()
            for param in module.parameters():
                param.grad = None

    def vmapped() -> None:
        vmap(one_loss)(stacked, x, y).sum().backward()
        for leaf in stacked.values():
            leaf.grad = None

    return {"separate": separate, "vmap": vmapped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sides = make_sides(args.clients, args.batch, args.seed)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.repeats):
        for name, step in sides.items():
            step()
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append((time.perf_counter() - start) / args.steps * 1000)
    rows = []
    for name, step in sides.items():
        with profile() as prof:
            for _ in range(3):
                step()
        self_ms = {event.key: event.self_cpu_time_total / 1000 / 3 for event in prof.key_averages()}
        rows.append(
            {
                "side": name,
                "clients": args.clients,
                "batch": args.batch,
                "ms_per_step": round(statistics.median(times[name]), 1),
                "ratio": f"{statistics.median(times[name]) / statistics.median(times['separate']):.2f}x",
                "conv_forward_ms": round(self_ms.get(_FORWARD, 0.0), 1),
                "conv_backward_ms": round(self_ms.get(_BACKWARD, 0.0), 1),
                "profiled_ms": round(sum(self_ms.values()), 1),
            }
        )
    for row in rows:
        print(" | ".join(str(row[key]) for key in COLUMNS))
    if not args.no_save:
        command = f"python benchmarks/stacked_cnn_step.py --clients {args.clients} --batch {args.batch}"
        command += f" --steps {args.steps} --repeats {args.repeats} --threads {args.threads}"
        notes = [
            "Written by `benchmarks/stacked_cnn_step.py` (its docstring explains the method): one training step"
            " (forward, loss, backward; no optimizer) of every client, as separate steps or as one `vmap` step over"
            " the clients' stacked weights; median over repeats; the convolution columns are self CPU time per step"
            " from `torch.profiler`.",
            "",
            f"- command: `{command}`",
        ]
        title = "One step of the FedPAC paper's CNN for many clients: separate or vmapped"
        print(write_table("stacked_cnn_step", title, rows, COLUMNS, notes, environment(args.seed)))


if __name__ == "__main__":
    main()
