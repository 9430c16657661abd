"""HyFEM vs stand-alone, centralised and FedProx on two real hybrid settings, plus the cost of neuron matching.

Zhang, Yin, Chen & Hong, "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and
Implementation", TMLR 2024. The paper's data (ModelNet40 views, CIFAR-10/EuroSAT blocks) need downloads; the two
settings here run offline from the shipped configs:

* ``digits``: scikit-learn's digits cut into four quadrant blocks with the appendix C.1 client table
  (``configs/hyfem/digits_quadrants*.yaml``; FedProx on the two common quadrants, as in the appendix);
* ``mfeat``: UCI Multiple Features, its six real feature sets as blocks, a hybrid table with uncovered cells
  (``configs/hyfem/mfeat_views*.yaml``).

Reported on the held-out test part after the last round, mean ± std over seeds (the seed drives the data split and
the training): HyFEM's server model on full-feature samples ("global"), the mean over clients of their own models
on every class restricted to their blocks ("clients"), the stand-alone clients' mean, the centralised model (server
architecture on all pooled training data) and, for FedProx (digits), both of the paper's comparisons like with like:
its global model against HyFEM's server model, and its client models after a round's Q local steps from the global
model against HyFEM's client models after their last Q local steps. The paper gives no numbers, only
curves; its qualitative claims are checked instead. Accuracy over rounds is plotted on the validation part.

Matching cost: seconds for one round's :func:`~fedhet.functional.model_matching` (``2M`` passes, exact cost) on
random classifiers as the hidden width and the number of clients grow.

Run from the repository root: ``python benchmarks/hyfem_reproduce.py --seeds 3 --rounds 32``. Writes
``benchmarks/results/hyfem_reproduce{tag}.{csv,md}``, ``hyfem_accuracy{tag}.png`` and ``hyfem_matching_cost.{csv,md}``.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from _common import RESULTS_DIR, environment, quiet_trainer, write_table
from fedhet.core import LocalPhase
from fedhet.functional import Classifier, model_matching
from fedhet.modules import FedProx

ROOT = Path(__file__).parents[1]
SETTINGS = {
    "digits": {
        "HyFEM": "digits_quadrants",
        "stand-alone": "digits_quadrants_local",
        "centralised": "digits_quadrants_centralised",
        "FedProx (TL, BL)": "digits_quadrants_fedprox",
    },
    "mfeat": {"HyFEM": "mfeat_views", "stand-alone": "mfeat_views_local", "centralised": "mfeat_views_centralised"},
}


def instantiate(section: dict[str, Any], **overrides: Any) -> Any:
    """The object a config section names, with some ``init_args`` replaced."""
    module, _, name = section["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**{**section.get("init_args", {}), **overrides})


class FedProxClientModels(FedProx):
    """FedProx that, with ``local_update`` set, evaluates each client's model after a local update from the global one.

    That update is the one FedProx's clients make every round (the trainer's ``Q`` local steps with the proximal term
    anchored at the received model), so the evaluated models are FedProx's client models, the counterpart of HyFEM's
    clients (evaluated after their last local update, ``specs/hyfem.md`` §9.17); without it the global model is
    evaluated.
    """

    local_update = False

    def adaptation_phases(self) -> list[LocalPhase]:
        """The round's local schedule before evaluation when ``local_update`` is set."""
        return [LocalPhase("local")] if self.local_update else []


def run(config_name: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Fit one shipped config with ``seed``; the validation curve and the final test metrics.

    FedProx is tested twice, with its global model (``test``) and with its client models (``test_clients``).
    """
    config = yaml.safe_load((ROOT / "configs" / "hyfem" / f"{config_name}.yaml").read_text())
    datamodule = instantiate(config["data"], seed=seed)
    model = instantiate(config["model"])
    if isinstance(model, FedProx):
        model = FedProxClientModels(**config["model"].get("init_args", {}))
    trainer = quiet_trainer(
        args.rounds, seed=seed, root=root, local_steps=config["trainer"]["local_steps"], eval_every=args.eval_every
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule)
    seconds = time.perf_counter() - start
    test = trainer.test(model, datamodule)
    test_clients = None
    if isinstance(model, FedProxClientModels):
        model.local_update = True
        test_clients = trainer.test(model, datamodule)
    curve = [
        (int(m["round"]) + 1, m.get("val/global_acc", m["val/acc_mean"]), m["val/acc_mean"])
        for m in trainer.history
        if "val/acc_mean" in m
    ]
    unused = getattr(datamodule, "unused_fraction", 0.0)
    return {"test": test, "test_clients": test_clients, "curve": curve, "seconds": seconds, "unused": unused}


def matching_seconds(num_clients: int, hidden: int, blocks: int = 4, width: int = 32, repeats: int = 3) -> float:
    """Median seconds of one round's matching: ``num_clients`` random clients with 3 of ``blocks`` blocks each."""
    g = torch.Generator().manual_seed(0)
    e0 = blocks * width
    cols = [
        torch.cat([torch.arange(b * width, (b + 1) * width) for b in range(blocks) if b != m % blocks])
        for m in range(num_clients)
    ]
    clients = [
        Classifier(
            torch.randn(hidden, len(c), generator=g),
            torch.randn(hidden, generator=g),
            torch.randn(10, hidden, generator=g),
            torch.randn(10, generator=g),
        )
        for c in cols
    ]
    previous = Classifier(torch.randn(hidden, e0), torch.randn(hidden), torch.randn(10, hidden), torch.randn(10))
    weights = [1.0 / num_clients] * num_clients
    perms = [torch.arange(hidden)] * num_clients
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model_matching(
            clients, cols, perms, weights, previous, 2 * num_clients, "exact", torch.Generator().manual_seed(1)
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def plot(curves: dict[str, dict[str, list[list[tuple[int, float, float]]]]], path: Path) -> None:
    """Validation accuracy over rounds, mean over seeds with a ±1 std band, one panel per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.2), squeeze=False)
    for ax, (setting, methods) in zip(axes[0], curves.items(), strict=True):
        for method, runs in methods.items():
            lines = [("server (global)", 1), ("clients (mean)", 2)] if method == "HyFEM" else [("", 2)]
            for label, column in lines:
                rounds = [point[0] for point in runs[0]]
                values = torch.tensor([[point[column] for point in curve] for curve in runs]) * 100
                mean, std = values.mean(0), values.std(0) if len(runs) > 1 else torch.zeros(len(rounds))
                name = f"{method} {label}".strip()
                ax.plot(rounds, mean, label=name, linestyle="-" if column == 1 or method != "HyFEM" else "--")
                ax.fill_between(rounds, mean - std, mean + std, alpha=0.2)
        ax.set_title(f"{setting}: validation accuracy")
        ax.set_xlabel("round")
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=32, help="rounds of 32 local SGD steps (the configs: 64)")
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--tag", default="", help="suffix of the output files, e.g. _digits64")
    parser.add_argument("--skip-cost", action="store_true", help="do not time the matching")
    args = parser.parse_args()
    torch.set_num_threads(1)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)

    rows: list[dict[str, Any]] = []
    curves: dict[str, Any] = {}
    unused: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for setting in args.settings:
            curves[setting] = {}
            for method, config_name in SETTINGS[setting].items():
                results = [run(config_name, seed, args, Path(tmp)) for seed in range(args.seeds)]
                curves[setting][method] = [r["curve"] for r in results]
                seconds = statistics.mean(r["seconds"] for r in results)
                if method == "HyFEM":
                    unused[setting] = results[0]["unused"]
                    metrics = {"server (global)": "test/global_acc", "clients (mean)": "test/acc_mean"}
                elif method == "stand-alone":
                    metrics = {"clients (mean)": "test/acc_mean"}
                elif method.startswith("FedProx"):  # its global model, and its clients after their local steps
                    metrics = {"server (global)": "test/acc_mean", "clients (mean)": "clients:test/acc_mean"}
                else:  # one model for everyone: the centralised model
                    metrics = {"server (global)": "test/acc_mean"}
                for metric, key in metrics.items():
                    part, _, key = key.rpartition(":")
                    mean, std = mean_std([100 * r["test_clients" if part else "test"][key] for r in results])
                    rows.append(
                        {
                            "setting": setting,
                            "method": method,
                            "model": metric,
                            "test_acc_mean": round(mean, 2),
                            "test_acc_std": round(std, 2),
                            "accuracy": f"{mean:.2f} ± {std:.2f}",
                            "seconds_per_run": round(seconds, 1),
                        }
                    )
                print(
                    setting,
                    method,
                    [r["accuracy"] for r in rows if r["method"] == method and r["setting"] == setting],
                    flush=True,
                )
    plot(curves, RESULTS_DIR / f"hyfem_accuracy{args.tag}.png")

    def value(setting: str, method: str, model: str) -> float:
        return next(
            r["test_acc_mean"] for r in rows if (r["setting"], r["method"], r["model"]) == (setting, method, model)
        )

    claims = ["Paper's qualitative claims (section 4, appendix C.1; the paper reports curves, no numbers):", ""]
    for setting in args.settings:
        server, clients = value(setting, "HyFEM", "server (global)"), value(setting, "HyFEM", "clients (mean)")
        alone = value(setting, "stand-alone", "clients (mean)")
        central = value(setting, "centralised", "server (global)")
        claims.append(
            f"* {setting}: server {server:.2f} > stand-alone {alone:.2f}: {server > alone};"
            f" server within {central - server:.2f} points of centralised {central:.2f};"
            f" clients {clients:.2f} > stand-alone {alone:.2f}: {clients > alone}; clients < server: {clients < server}"
        )
        if "FedProx (TL, BL)" in SETTINGS[setting]:
            prox_server = value(setting, "FedProx (TL, BL)", "server (global)")
            prox_clients = value(setting, "FedProx (TL, BL)", "clients (mean)")
            claims.append(
                f"* {setting}, like with like (appendix C.1: HyFEM better than FedProx for the server model and for the"
                f" averaged client models): global vs global, HyFEM server {server:.2f} > FedProx global model"
                f" {prox_server:.2f}: {server > prox_server}; clients vs clients, each after the round's Q local steps,"
                f" HyFEM {clients:.2f} > FedProx {prox_clients:.2f}: {clients > prox_clients}"
            )
    notes = [
        f"{args.rounds} rounds of Q = 32 local SGD steps (batch 32) for every method (the shipped configs: 64 rounds;"
        " the paper: T = 64 or 128, Q = 32). Test accuracy (%) after the last round, mean ± std over"
        f" {args.seeds} seeds (seed = data split and training); s/run measured on a shared, busy machine. Unused"
        " (block, class) data:" + "".join(f" {s} {100 * u:.1f}%;" for s, u in unused.items()),
        "",
        *claims,
        "",
        f"Validation accuracy over rounds: `hyfem_accuracy{args.tag}.png`.",
    ]
    columns = {"setting": "setting", "method": "method", "model": "model", "accuracy": "test accuracy (%)"}
    write_table(
        f"hyfem_reproduce{args.tag}",
        "HyFEM reproduction (small scale, offline data)",
        rows,
        {**columns, "seconds_per_run": "s/run"},
        notes,
        environment(),
    )
    if not args.skip_cost:
        cost = [{"clients": m, "hidden": 64, "seconds_per_round": matching_seconds(m, 64)} for m in (4, 8, 16, 32)]
        cost += [{"clients": 6, "hidden": h, "seconds_per_round": matching_seconds(6, h)} for h in (32, 64, 128, 256)]
        for row in cost:
            row["seconds_per_round"] = round(row["seconds_per_round"], 4)
        write_table(
            "hyfem_matching_cost",
            "HyFEM: cost of one round of neuron matching",
            cost,
            {"clients": "clients M", "hidden": "hidden H = H_0", "seconds_per_round": "seconds per round"},
            [
                "`model_matching` with 2M passes, exact cost, 4 blocks of 32 features (each client holds 3), 10"
                " classes, random classifiers; median of 3, one torch thread."
            ],
            environment(),
        )


if __name__ == "__main__":
    main()
