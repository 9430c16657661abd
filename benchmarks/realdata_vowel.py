"""Personalised FL on real data we did not tune on: UCI Vowel, one client per speaker (FedPAC and its baselines).

Data: the Deterding vowels bundled with fedhet (:class:`~fedhet.datamodules.VowelFederation`): 15 speakers, each a
client with 44 training utterances (4 repetitions of the 11 vowels) and 22 test utterances (the other 2
repetitions), 9 log-area ratios. The label space and the class balance are the same everywhere; what differs between
clients is the voice (feature shift). This is the setting the classifier-family methods assume can be shared (one
body) while FedPAC's head mixing and FedRep's personal heads absorb what differs.

Methods, one MLP body (``--hidden``) and linear head for all, SGD with the same learning rate, the same rounds and
local epochs: Local (no sharing), FedAvg (one global model), FedAvg-FT (the global model fine-tuned on each client for
``--finetune-epochs`` before testing), FedPer, FedRep, FedBABU and FedPAC (Xu, Tong & Huang, ICLR 2023: feature
alignment to global class centroids + head mixing by a QP). Every client's model is tested on its own held-out
repetitions; the table gives the mean over clients, the worst client, and mean ± std over seeds (each seed redraws
the held-out repetitions and the initialisation).

Reference points outside the federation, fitted with scikit-learn on the same splits (no tuning): per-speaker
logistic regression and 1-nearest-neighbour (Local ceilings with a model that needs no body), and a pooled
logistic regression / MLP over every speaker's training part with the speaker-independent test (a centralised
estimate of what sharing can give).

Run from the repository root: ``nice -n 19 python benchmarks/realdata_vowel.py --seeds 3``. Writes
``benchmarks/results/realdata_vowel.{csv,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _common import RESULTS_DIR, environment, quiet_trainer, write_table
from _tables import percent_mean_std
from fedhet.callbacks import HeadMixing
from fedhet.datamodules import VowelFederation
from fedhet.modules import FedAvg, FedBABU, FedPAC, FedPer, FedRep, LocalOnly


def methods(args: argparse.Namespace) -> dict[str, Callable[[], Any]]:
    """Every compared method, on the same MLP body, optimiser and learning rate."""
    common: dict[str, Any] = {
        "hidden_dims": args.hidden,
        "network": "mlp",
        "lr": args.lr,
        "momentum": 0.5,
        "weight_decay": 5e-4,
    }
    return {  # FedPAC right after Local, so a cut-off run has the main comparison first
        "Local": lambda: LocalOnly(**common),
        "FedPAC": lambda: FedPAC(head_epochs=1, head_lr=args.lr, **common),
        "FedAvg": lambda: FedAvg(**common),
        "FedAvg-FT": lambda: FedAvg(finetune_epochs=args.finetune_epochs, **common),
        "FedRep": lambda: FedRep(head_epochs=1, **common),
        "FedPer": lambda: FedPer(**common),
        "FedBABU": lambda: FedBABU(finetune_epochs=args.finetune_epochs, **common),
        # FedPAC's ablation (its Table 5): which of its two parts costs accuracy on these small clients
        "FedPAC (FA only)": lambda: FedPAC(head_epochs=1, head_lr=args.lr, classifier_collaboration=False, **common),
        "FedPAC (CC only)": lambda: FedPAC(head_epochs=1, head_lr=args.lr, feature_alignment=False, **common),
        "FedPAC (none)": lambda: FedPAC(
            head_epochs=1, head_lr=args.lr, feature_alignment=False, classifier_collaboration=False, **common
        ),
    }


def run(method: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    """Train one method with one seed; its test metrics (clients' own held-out repetitions).

    With FedPAC's head mixing, also ``qp_self_weight``: the mean over clients of the weight the last round's QP gives
    a client's own head in its mixed head (the diagonal of the combination weights).
    """
    data = VowelFederation(seed=seed, standardize=args.standardize)
    trainer = quiet_trainer(args.rounds, seed, root / f"{method}_{seed}", local_epochs=args.local_epochs)
    model = methods(args)[method]()
    trainer.fit(model, data)
    metrics = trainer.test(model, data)
    mixing = [cb for cb in trainer.callbacks if isinstance(cb, HeadMixing) and cb.weights is not None]
    if mixing:
        metrics["qp_self_weight"] = float(mixing[0].weights.diag().mean())
    return metrics


def sklearn_references(seed: int, standardize: bool) -> dict[str, dict[str, float]]:
    """Scikit-learn reference points on the federation's exact splits: mean and worst client accuracy."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier

    clients = VowelFederation(seed=seed, standardize=standardize).clients.values()
    splits = [
        (c.train_dataset.x.numpy(), c.train_dataset.y.numpy(), c.test_dataset.x.numpy(), c.test_dataset.y.numpy())
        for c in clients
    ]
    pooled_x = np.concatenate([s[0] for s in splits])
    pooled_y = np.concatenate([s[1] for s in splits])
    factories: dict[str, Callable[[], Any]] = {
        "logistic": lambda: LogisticRegression(max_iter=2000),
        "1-NN": lambda: KNeighborsClassifier(n_neighbors=1),
    }
    out: dict[str, dict[str, float]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, factory in factories.items():
            accs = [float(factory().fit(x, y).score(xt, yt)) for x, y, xt, yt in splits]
            out[f"sklearn per-speaker {name} (Local)"] = {"mean": float(np.mean(accs)), "worst": float(min(accs))}
        pooled = {
            "logistic": LogisticRegression(max_iter=2000).fit(pooled_x, pooled_y),
            "MLP": MLPClassifier(hidden_layer_sizes=(64,), max_iter=3000, random_state=seed).fit(pooled_x, pooled_y),
        }
        for name, model in pooled.items():
            accs = [float(model.score(xt, yt)) for _, _, xt, yt in splits]
            out[f"sklearn pooled {name} (centralised)"] = {"mean": float(np.mean(accs)), "worst": float(min(accs))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-epochs", type=int, default=2)
    parser.add_argument("--finetune-epochs", type=int, default=5)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--standardize", action="store_true", help="per-speaker standardisation (off: raw features)")
    parser.add_argument("--methods", nargs="+", default=None, help="a subset of the methods (default: all)")
    parser.add_argument("--tag", default="realdata_vowel")
    args = parser.parse_args()

    names = args.methods or list(methods(args))
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    references: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):  # seed-major, so a cut-off run still has every method at its first seeds
            references.append(sklearn_references(seed, args.standardize))
            for method in names:
                start = time.perf_counter()
                metrics = run(method, seed, args, Path(tmp))
                results[method].append(
                    {"mean": metrics["test/acc_mean"], "worst": metrics["test/acc_worst"], **self_weight(metrics)}
                )
                seconds[method].append(time.perf_counter() - start)
                print(f"seed {seed} {method:10s} mean {metrics['test/acc_mean']:.4f}", flush=True)
                write_results(args, results, seconds, references)
    print((RESULTS_DIR / f"{args.tag}.md").read_text())


def self_weight(metrics: dict[str, float]) -> dict[str, float]:
    """The QP's mean self-weight of a FedPAC run (:func:`run`), when it has one."""
    return {"self": metrics["qp_self_weight"]} if "qp_self_weight" in metrics else {}


def write_results(
    args: argparse.Namespace,
    results: dict[str, list[dict[str, float]]],
    seconds: dict[str, list[float]],
    references: list[dict[str, dict[str, float]]],
) -> None:
    """Write the table of every method and reference point over the seeds finished so far."""
    measured = [(name, runs, seconds[name]) for name, runs in results.items() if runs]
    measured += [(name, [r[name] for r in references], []) for name in references[0]]
    rows = [
        {
            "method": name,
            "seeds": len(runs),
            "acc_mean": percent_mean_std([r["mean"] for r in runs]),
            "acc_worst": percent_mean_std([r["worst"] for r in runs]),
            "runs_acc_mean": " ".join(f"{100 * r['mean']:.1f}" for r in runs),
            "seconds_per_run": f"{statistics.mean(times):.0f}" if times else "",
            "qp_self_weight": (
                f"{statistics.mean(r['self'] for r in runs):.2f}" if all("self" in r for r in runs) else ""
            ),
        }
        for name, runs, times in measured
    ]
    notes = [
        f"UCI Vowel (Deterding), 15 speakers = 15 clients, 44 train / 22 test utterances each (held-out repetitions),"
        f" {'per-speaker standardised' if args.standardize else 'raw'} features; MLP body {args.hidden} + linear head,"
        f" SGD lr {args.lr} momentum 0.5 wd 5e-4, batch 11, {args.rounds} rounds x {args.local_epochs} local"
        f" epoch(s), fine-tuning {args.finetune_epochs} epochs (FedAvg-FT, FedBABU). Test accuracy (%) of every"
        " client's own model on its own held-out repetitions, mean over clients and worst client, mean ± std over the"
        f" seeds finished (column `seeds`, of {args.seeds} asked; per-seed client means in `per seed`). Rows named"
        " sklearn: scikit-learn on the same splits, no tuning. s/run: wall seconds on a shared machine. QP self-weight"
        " (FedPAC with head mixing): the weight the last round's QP gives each client's own head in its mixed head,"
        " mean over clients and seeds (1: no mixing).",
    ]
    columns = {
        "method": "method",
        "seeds": "seeds",
        "acc_mean": "mean client acc (%)",
        "acc_worst": "worst client acc (%)",
        "runs_acc_mean": "per seed",
        "seconds_per_run": "s/run",
        "qp_self_weight": "QP self-weight",
    }
    write_table(args.tag, "UCI Vowel by speaker: FedPAC and baselines", rows, columns, notes, environment())


if __name__ == "__main__":
    main()
