"""The stacked path per method: a round's training time one client at a time against ``stack_clients``.

What runs:
    For each method, the same federation trained twice in this process, one client at a time and with
    ``FederatedTrainer(stack_clients=S)``, alternating ``--repeats`` times (so that a burst of load from elsewhere hits
    both): ``--clients`` synthetic Gaussian-blob clients of one feature space (``--features`` features, 10 classes,
    each client holding 3 of them, ``--samples`` training samples, batch 16), ``--rounds`` rounds of one local epoch
    (each method's own phases: FedRep's head-then-body, FedPAC's head epoch and centroid statistics, FLIC's
    pre-training at the first round and its anchor copy), one torch thread.

How it is measured:
    The engine's ``time/train_s`` (the process's client work of a round: loading each client, training it, building
    its upload) of rounds ``1 .. R-1`` (round 0 builds the clients, and FLIC pre-trains there), median over rounds
    and repeats; the speed-up is the one-at-a-time median over the stacked one. The final mean validation accuracy
    of each side is printed beside it as a check that both trained the same federation (the tests prove equality
    up to float summation order: ``tests/plugins/test_stacked.py``, ``tests/plugins/test_stacked_flic.py``).
    HyFEM and Global Layers stack too but need hybrid or tabular clients (their equality tests cover them); FedDaDiL
    does not apply (an optimal-transport loss over whole batches).

The reproduction's workloads (``--fedpac-scale small|medium|paper``):
    The same two paths on the FedPAC reproduction's recipe at that scale (``_fedpac_recipes.py``: its data,
    partition, networks, optimisers and local epochs; 20 clients, all training every round): MNIST-5k with the MLP
    body (126 training samples, 3 steps per epoch), Fashion-MNIST with the MLP body (600 samples, E = 2: 24 steps of
    a 784 x 128 layer), or the paper's CNN (600 samples, E = 5: 60 steps). The methods are then that module's
    (``--methods FedPAC FedAvg``...). Whether stacking pays where a client's compute, not the engine, is the cost.

Usage::

    python benchmarks/stacked_methods.py                       # 64 clients, stacks of 64
    python benchmarks/stacked_methods.py --clients 256 --methods FedAvg FLIC-HL
    python benchmarks/stacked_methods.py --fedpac-scale medium --methods FedPAC FedAvg --stack 20

Results go to ``benchmarks/results/stacked_methods.csv`` and ``.md`` (``stacked_methods_fedpac_<scale>`` with
``--fedpac-scale``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

import _fedpac_recipes
from _common import environment, quiet_trainer, write_table
from fedhet.datamodules import FederatedDataModule
from fedhet.modules import FLIC, FedAvg, FederatedModule, FedPAC, FedProx, FedRep

NUM_CLASSES = 10
METHODS: dict[str, Callable[[], FederatedModule]] = {
    "FedAvg": lambda: FedAvg(hidden_dims=[64], lr=0.05),
    "FedProx": lambda: FedProx(hidden_dims=[64], lr=0.05, mu=0.1),
    "FedRep": lambda: FedRep(hidden_dims=[64], lr=0.05),
    "FedPAC": lambda: FedPAC(hidden_dims=[64], lr=0.05, head_epochs=1, lambda_align=1.0),
    "FLIC-Class": lambda: FLIC(latent_dim=16, embedding_hidden_dims=[32], pretrain_epochs=2),
    "FLIC-HL": lambda: FLIC(latent_dim=16, embedding_hidden_dims=[32], pretrain_epochs=2, variant="hl"),
}
COLUMNS = {
    "method": "method",
    "clients": "clients",
    "sequential_s": "one at a time, s / round",
    "stacked_s": "stacked, s / round",
    "speedup": "speed-up",
    "sequential_acc": "one at a time, accuracy",
    "stacked_acc": "stacked, accuracy",
}


def federation(clients: int, features: int, samples: int, seed: int = 0) -> FederatedDataModule:
    """Gaussian-blob clients of one feature space, each holding 3 of the 10 classes (shared centres)."""
    generator = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(NUM_CLASSES, features, generator=generator)
    data = {}
    for i in range(clients):
        classes = torch.randperm(NUM_CLASSES, generator=generator)[:3]
        n = samples * 2  # half for validation
        y = classes[torch.randint(3, (n,), generator=generator)]
        data[f"client_{i:04d}"] = (centres[y] + torch.randn(n, features, generator=generator), y)
    return FederatedDataModule.from_tensors(
        data, NUM_CLASSES, batch_size=16, val_fraction=0.5, test_fraction=0.0, seed=seed
    )


def run(method: str, args: argparse.Namespace, stack: int | None, root: Path) -> tuple[float, float]:
    """One fit; the median ``time/train_s`` of rounds ``1 .. R-1`` and the final mean accuracy.

    Validation accuracy on the synthetic clients; test accuracy on the FedPAC reproduction's (no validation split).
    """
    if args.fedpac_scale is None:
        trainer = quiet_trainer(args.rounds, root=root, stack_clients=stack)
        trainer.fit(METHODS[method](), federation(args.clients, args.features, args.samples))
        accuracy = trainer.history[-1]["val/acc_mean"]
    else:
        scale = _fedpac_recipes.SCALES[args.fedpac_scale]
        trainer = quiet_trainer(args.rounds, root=root, stack_clients=stack, local_epochs=scale["local_epochs"])
        model, data = _fedpac_recipes.methods(scale)[method](), _fedpac_recipes.federation(scale, 0, args.clients)
        trainer.fit(model, data)
        accuracy = trainer.test(model, data)["test/acc_mean"]
    times = [row["time/train_s"] for row in trainer.history[1:]]
    return statistics.median(times), float(accuracy)


def measure(method: str, args: argparse.Namespace) -> dict[str, object]:
    """Alternate the two paths ``args.repeats`` times; medians of the per-round medians."""
    sequential, stacked, accuracy = [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for stack, times in ((None, sequential), (args.stack, stacked)):
                seconds, acc = run(method, args, stack, Path(tmp) / f"{repeat}-{stack}")
                times.append(seconds)
                accuracy[stack] = acc
    seq, stk = statistics.median(sequential), statistics.median(stacked)
    row = {
        "method": method,
        "clients": args.clients,
        "sequential_s": round(seq, 4),
        "stacked_s": round(stk, 4),
        "speedup": f"{seq / stk:.2f}x",
        "sequential_acc": round(accuracy[None], 4),
        "stacked_acc": round(accuracy[args.stack], 4),
    }
    print(row, flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fedpac-scale", choices=sorted(_fedpac_recipes.SCALES), help="the FedPAC reproduction's")
    parser.add_argument("--methods", nargs="+", default=None, help="default: every method of the workload")
    parser.add_argument("--clients", type=int, default=None, help="default: 64 (the FedPAC reproduction's: 20)")
    parser.add_argument("--stack", type=int, default=64, help="stack_clients")
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--samples", type=int, default=64, help="training samples per client")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    scale = args.fedpac_scale
    known = list(METHODS) if scale is None else list(_fedpac_recipes.methods(_fedpac_recipes.SCALES[scale]))
    args.methods = args.methods or known
    unknown = sorted(set(args.methods) - set(known))
    if unknown:
        parser.error(f"--methods: {unknown} are not among this workload's methods {known}")
    if args.clients is None:
        args.clients = 64 if scale is None else 20
    torch.set_num_threads(1)
    rows = [measure(method, args) for method in args.methods]
    if args.no_save:
        return
    timing = (
        "Written by `benchmarks/stacked_methods.py` (its docstring explains the method): the engine's"
        f" `time/train_s` of rounds 1..{args.rounds - 1}, median over rounds and {args.repeats} alternated"
        f" repeats; `stack_clients={args.stack}`, 1 torch thread."
    )
    if scale is None:
        workload = (
            f"{args.clients} clients of {args.samples} training samples, {args.features} features, 3 of 10 classes"
            " each, batch 16, one local epoch; accuracy: the final mean validation accuracy."
        )
        name, title = "stacked_methods", "Stacked path per method"
        config = "none: the script's built-in Gaussian-blob clients (above); no fedhet config or suite"
    else:
        recipe = _fedpac_recipes.SCALES[scale]
        workload = (
            f"The FedPAC reproduction's `{scale}` recipe (`_fedpac_recipes.py`): {args.clients} clients of"
            f" {recipe['data']} in the paper's dominant-class partition, {recipe['samples']} samples each"
            f" ({1 - recipe['test_fraction']:.0%} for training), the {recipe['network']} body, batch 50, E ="
            f" {recipe['local_epochs']}; accuracy: the mean test accuracy after the last round."
        )
        name, title = f"stacked_methods_fedpac_{scale}", f"Stacked path on the FedPAC reproduction ({scale} scale)"
        config = f"none: `_fedpac_recipes.py`'s `{scale}` recipe (above); no fedhet config or suite"
    print(write_table(name, title, rows, COLUMNS, [timing, workload], environment(seed=0, config=config)))


if __name__ == "__main__":
    main()
