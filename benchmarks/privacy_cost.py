"""The accuracy cost of client-level differential privacy (UploadPrivacy) for FedAvg and FedRep on digits.

The federation is the data of ``configs/fedavg/digits.yaml`` (scikit-learn digits, Dirichlet(0.5) label skew over 10
clients, 25% test), the models those of ``benchmarks/baselines_digits.py``. For each method the clipping norm C is the
median L2 norm of the clients' shared-parameter updates in a run without privacy (seed 0); every client takes part in
every round (sample rate q = 1), and the noise multiplier z for each target epsilon (delta = 1e-5, all rounds) comes
from Opacus's RDP accountant. "clip only" clips at C with negligible noise (z = 1e-6: no meaningful epsilon) to
separate the cost of clipping from that of noise; Local (each client alone, nothing shared) is the reference a private
federation should beat. The epsilon column is the accountant's value after the last round,
as the trainer logged it.

Run from the repository root: ``python benchmarks/privacy_cost.py [--seeds 3] [--rounds 30] [--clients 10]``.
Writes ``benchmarks/results/privacy_cost_digits{_<clients>}.{csv,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from _common import quiet_trainer, write_table
from fedhet.callbacks import FederatedCallback
from fedhet.datamodules import DigitsFederation
from fedhet.functional.privacy import global_l2_norm, noise_multiplier_for
from fedhet.modules import FedAvg, FedRep, LocalOnly
from fedhet.plugins import UploadPrivacy

RESULTS = Path(__file__).parent / "results"
COMMON = {"hidden_dims": [64], "lr": 0.1, "momentum": 0.5}
METHODS = {
    "FedAvg": lambda: FedAvg(**COMMON),
    "FedRep": lambda: FedRep(head_epochs=2, **COMMON),
    "Local": lambda: LocalOnly(**COMMON),  # the reference: nothing leaves a client, no privacy needed
}
EPSILONS = (16.0, 4.0, 1.0)
DELTA = 1e-5
KEYS = ("test/acc_mean", "test/acc_worst")


class UpdateNorms(FederatedCallback):
    """The L2 norm of every client's shared-parameter update, over all rounds."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_aggregate_start(self, trainer, updates) -> None:
        """Record ``||shared - sent||`` of each upload."""
        sent = trainer.server_state.shared
        for update in updates:
            self.norms.append(float(global_l2_norm({n: v - sent[n] for n, v in update.shared.items()})))


def data(seed: int, clients: int) -> DigitsFederation:
    return DigitsFederation(num_clients=clients, alpha=0.5, val_fraction=0.15, test_fraction=0.25, seed=seed)


def run(method: str, seed: int, args: argparse.Namespace, root: Path, privacy=None, callbacks=()) -> dict:
    trainer = quiet_trainer(args.rounds, seed, root, server_update=privacy, callbacks=list(callbacks))
    model, federation = METHODS[method](), data(seed, args.clients)
    trainer.fit(model, federation)
    metrics = trainer.test(model, federation)
    metrics["epsilon"] = trainer.history[-1].get("privacy/epsilon", float("inf"))
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for method in METHODS:
            if method == "Local":
                clip, settings = float("nan"), {"nothing shared": None}
            else:
                probe = UpdateNorms()
                run(method, 0, args, Path(tmp) / "probe", callbacks=[probe])
                clip = statistics.median(probe.norms)
                settings = {"no DP": None, "clip only": 1e-6}
                settings |= {f"eps={e:g}": noise_multiplier_for(e, DELTA, 1.0, args.rounds) for e in EPSILONS}
            for name, z in settings.items():
                start = time.perf_counter()
                runs = [
                    run(
                        method,
                        s,
                        args,
                        Path(tmp) / f"{method}_{name}_{s}",
                        UploadPrivacy(clip, z, DELTA) if z else None,
                    )
                    for s in range(args.seeds)
                ]
                row = {"method": method, "setting": name, "clip_norm": clip, "noise_multiplier": z or 0.0}
                row["epsilon"] = runs[0]["epsilon"]
                row["seconds_per_run"] = (time.perf_counter() - start) / args.seeds
                for key in KEYS:
                    values = [r[key] for r in runs]
                    row[key] = statistics.mean(values)
                    row[key + "_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
                rows.append(row)
                print(f"{method} {name}: z={row['noise_multiplier']:.3f} eps={row['epsilon']:.3g} "
                      f"acc={row['test/acc_mean']:.4f}±{row['test/acc_mean_std']:.4f}", flush=True)  # fmt: skip
    write(rows, args)


def write(rows: list[dict], args: argparse.Namespace) -> None:
    for row in rows:
        row["epsilon_shown"] = (
            "—" if row["noise_multiplier"] == 0 else ("huge" if row["epsilon"] > 1e4 else f"{row['epsilon']:.2f}")
        )
        row["C"] = "—" if row["noise_multiplier"] == 0 and row["setting"] != "no DP" else f"{row['clip_norm']:.3f}"
        row["z"] = f"{row['noise_multiplier']:.3g}"
        for key, short in zip(KEYS, ("acc", "worst"), strict=True):
            row[short] = f"{row[key]:.3f} ± {row[key + '_std']:.3f}"
        row["s/run"] = f"{row['seconds_per_run']:.1f}"
    title = f"Accuracy cost of client-level DP on digits ({args.clients} clients)"
    notes = [
        f"configs/fedavg/digits.yaml data: {args.clients} clients, Dirichlet alpha=0.5, {args.rounds} rounds x 1 local"
        f" epoch, every client every round (q = 1), delta = {DELTA:g}, {args.seeds} seeds (mean ± std of the"
        " client-averaged test accuracy). C: median client update norm without DP (seed 0); z from Opacus's RDP"
        " accountant for the target epsilon; epsilon: the accountant's value the trainer logged after the last round.",
    ]
    columns = {"method": "method", "setting": "setting", "C": "C", "z": "z", "epsilon_shown": "epsilon"}
    columns |= {"acc": "mean client acc", "worst": "worst client acc", "s/run": "s/run"}
    stem = "privacy_cost_digits" + ("" if args.clients == 10 else f"_{args.clients}")
    print(write_table(stem, title, rows, columns, notes))


if __name__ == "__main__":
    main()
