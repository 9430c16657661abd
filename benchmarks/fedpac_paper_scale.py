"""FedPAC at the paper's scale on Fashion-MNIST, one method per process, resumable, reported at the round reached.

Xu, Tong & Huang, ICLR 2023, Table 1 (FMNIST, 20 clients): the paper's CNN, body lr 0.01, FedPAC head lr 0.1, SGD
momentum 0.5, weight decay 5e-4, E = 5 local epochs, 200 rounds, 20 clients of 600 training + 600 test images in the
paper's dominant-class partition (the ``paper`` scale of ``fedpac_reproduce.py``; the same settings as
``configs/fedpac/fashion_mnist*.yaml``).

A 200-round run takes about half an hour per method on an idle 2-core machine, so each method trains in its own
process and checkpoints every ``--checkpoint-every`` rounds; ``--report`` evaluates every method's latest checkpoint
on the clients' test splits and writes the table at whatever round each run reached (said in the table), so a
partial run still gives an honest table. A stopped run resumes from its checkpoint when started again.

Run from the repository root::

    python benchmarks/fedpac_paper_scale.py --method FedPAC --root runs/fedpac_paper &   # one per method
    python benchmarks/fedpac_paper_scale.py --report --root runs/fedpac_paper

Writes ``benchmarks/results/fedpac_fashion_mnist_paper.{csv,md}`` (``--tag`` names other files).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from _common import environment, quiet_trainer, write_table
from fedhet.plugins import Checkpointing
from fedhet.plugins.run_folder import latest_checkpoint
from fedpac_reproduce import PAPER_FMNIST_20, SCALES, federation, methods

SCALE = SCALES["paper"]
METHODS = ("FedPAC", "FedAvg-FT", "FedRep", "Local")


def slug(name: str) -> str:
    """A folder name for a method."""
    return name.lower().replace(" ", "_").replace("(", "").replace(")", "").replace("-", "_")


def train(name: str, root: Path, seed: int, rounds: int, checkpoint_every: int, stack: int | None = None) -> None:
    """Train ``name`` for ``rounds`` rounds, resuming from its latest checkpoint when there is one.

    ``stack``: train the clients in stacks of this many (``stack_clients``; the CNN has no dropout or batch
    normalisation, so every method here stacks).
    """
    folder = root / f"{slug(name)}_{seed}"
    trainer = quiet_trainer(
        rounds,
        seed,
        folder,
        local_epochs=SCALE["local_epochs"],
        checkpointing=Checkpointing(every=checkpoint_every),
        stack_clients=stack,
    )
    last = latest_checkpoint(folder)  # the latest version folder's last.ckpt
    start = time.perf_counter()
    trainer.fit(methods(SCALE)[name](), federation(SCALE, seed, 20), ckpt_path=str(last) if last else None)
    print(f"{name}: {trainer.current_round} rounds, {time.perf_counter() - start:.0f} s", flush=True)


def report(names: list[str], root: Path, seed: int, rounds: int, tag: str) -> None:
    """Test every method's latest checkpoint and write the table (``benchmarks/results/<tag>.{csv,md}``)."""
    rows = []
    data = federation(SCALE, seed, 20)  # loaded once, every method's clients are the same
    for name in names:
        folder = root / f"{slug(name)}_{seed}"
        last = latest_checkpoint(folder)
        if last is None:
            print(f"{name}: no checkpoint yet under {folder}")
            continue
        trainer = quiet_trainer(rounds, seed, folder / "report", local_epochs=SCALE["local_epochs"])
        metrics = trainer.test(methods(SCALE)[name](), data, ckpt_path=str(last))
        rows.append(
            {
                "method": name,
                "rounds": trainer.current_round,
                "acc_mean": round(100 * metrics["test/acc_mean"], 2),
                "acc_worst": round(100 * metrics["test/acc_worst"], 2),
                "paper_fmnist_20": PAPER_FMNIST_20[name],
            }
        )
        print(rows[-1], flush=True)
    reached = sorted({r["rounds"] for r in rows})
    notes = [
        "FedPAC (Xu, Tong & Huang, ICLR 2023) Table 1, Fashion-MNIST, 20 clients, full participation: the paper's CNN"
        " for every method, body lr 0.01 (FedPAC's head lr 0.1), SGD momentum 0.5, weight decay 5e-4, E = 5 local"
        " epochs (FedPAC and FedRep: 1 head epoch first; FedAvg-FT: 1 fine-tuning epoch before evaluation), batch 50,"
        " 600 training + 600 test images per client in the paper's partition (20% uniform + 80% from the group's 3"
        " dominant classes, 5 groups).",
        "",
        f"**{'Partial' if reached != [rounds] else 'Complete'} run, seed {seed} only (1 seed):** each method is"
        f" reported at the last checkpointed round it reached ({', '.join(map(str, reached))} of the paper's {rounds};"
        " the `rounds` column). Rounds are not equal across methods when runs were stopped at the deadline, so"
        " compare each row with the paper at its own round count, not the rows with each other at face value.",
        "Accuracy: unweighted mean (and worst client) of the clients' test accuracies (%), each client's personalised"
        " model on its own 600 test images.",
    ]
    columns = {
        "method": "method",
        "rounds": "rounds",
        "acc_mean": "ours (mean %)",
        "acc_worst": "ours (worst client %)",
        "paper_fmnist_20": "paper (FMNIST 20)",
    }
    text = write_table(tag, "FedPAC at paper scale: Fashion-MNIST", rows, columns, notes,
                       environment(seed))  # fmt: skip
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=sorted(methods(SCALE)), help="train this method")
    parser.add_argument("--report", action="store_true", help="evaluate the checkpoints and write the table")
    parser.add_argument("--methods", nargs="*", default=list(METHODS), help="methods of the report")
    parser.add_argument("--root", type=Path, default=Path("fedhet_runs/fedpac_paper"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=SCALE["rounds"])
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stack-clients", type=int, default=None, help="train in stacks of this many clients")
    parser.add_argument("--tag", default="fedpac_fashion_mnist_paper", help="name of the results files")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # small convolutions on a shared machine: more threads only contend
    if args.method:
        train(args.method, args.root, args.seed, args.rounds, args.checkpoint_every, args.stack_clients)
    if args.report:
        report(args.methods, args.root, args.seed, args.rounds, args.tag)
    if not (args.method or args.report):
        parser.error("give --method NAME (train) and/or --report")


if __name__ == "__main__":
    main()
