"""Local vs FedAvg vs FedAvg-FT vs FedRep on a label-skewed split of scikit-learn's digits.

Each method trains from the same config (MLP body with one hidden layer, SGD, the same rounds and local epochs) on
``DigitsFederation`` (10 clients, Dirichlet label skew), for several seeds; every client's personalised model is then
evaluated on its own test split. The table gives mean client accuracy, sample-weighted accuracy and the worst client,
as mean ± standard deviation over seeds.

Run from the repository root: ``python benchmarks/baselines_digits.py [--seeds 5] [--rounds 40] [--alpha 0.5]``.
Writes ``benchmarks/results/baselines_digits.{csv,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _common import quiet_trainer
from fedhet.datamodules import DigitsFederation
from fedhet.modules import FedAvg, FedRep, LocalOnly

RESULTS = Path(__file__).parent / "results"
COMMON = {"hidden_dims": [64], "lr": 0.1, "momentum": 0.5}
METHODS = {
    "Local": lambda: LocalOnly(**COMMON),
    "FedAvg": lambda: FedAvg(**COMMON),
    "FedAvg-FT": lambda: FedAvg(finetune_epochs=1, **COMMON),
    "FedRep": lambda: FedRep(head_epochs=2, **COMMON),
}
KEYS = ("test/acc_mean", "test/acc_weighted", "test/acc_worst")


def run(method: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    data = DigitsFederation(num_clients=args.clients, alpha=args.alpha, test_fraction=0.25, seed=seed)
    trainer = quiet_trainer(args.rounds, seed, root / f"{method}_{seed}", local_epochs=args.local_epochs)
    model = METHODS[method]()
    trainer.fit(model, data)
    return trainer.test(model, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.5)
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in METHODS:
            start = time.perf_counter()
            runs = [run(method, seed, args, Path(tmp)) for seed in range(args.seeds)]
            row = {"method": method, "seconds_per_run": (time.perf_counter() - start) / args.seeds}
            for key in KEYS:
                values = [r[key] for r in runs]
                row[key] = statistics.mean(values)
                row[key + "_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
            rows.append(row)
            print(f"{method:10s} " + "  ".join(f"{k}={row[k]:.4f}±{row[k + '_std']:.4f}" for k in KEYS), flush=True)

    RESULTS.mkdir(exist_ok=True)
    header = ["method", *[k for key in KEYS for k in (key, key + "_std")], "seconds_per_run"]
    lines = [",".join(header)] + [",".join(str(r[h]) for h in header) for r in rows]
    (RESULTS / "baselines_digits.csv").write_text("\n".join(lines) + "\n")
    md = [
        f"Digits, {args.clients} clients, Dirichlet alpha={args.alpha}, {args.rounds} rounds x"
        f" {args.local_epochs} local epoch(s), {args.seeds} seeds (mean ± std of each client-averaged test metric)",
        "",
        "| method | mean client acc | weighted acc | worst client acc | s/run |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [f"{r[k]:.3f} ± {r[k + '_std']:.3f}" for k in KEYS]
        md.append(f"| {r['method']} | " + " | ".join(cells) + f" | {r['seconds_per_run']:.1f} |")
    (RESULTS / "baselines_digits.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
