"""Heterogeneous feature spaces on real data we did not tune on: Landsat Satellite bands (FLIC and HyFEM settings).

Data: Statlog Landsat Satellite, bundled with fedhet: 6,435 3x3 pixel neighbourhoods in four spectral bands (green,
red, two near-infrared; 9 values per band), 6 land-cover classes. Clients are sensors that record different bands,
so their feature spaces differ; two settings, each as its paper's protocol has it, from the shipped configs:

* ``flic`` (Rakotomamonjy et al., TMLR 2024): :class:`~fedhet.datamodules.SatelliteFederation`, 12 clients with two
  bands each (every pair of bands twice) and 3 of the 6 classes, disjoint samples, each client tested on its own
  held-out samples. FLIC-HL against its baselines on the same networks and budget: Local (``HetLocal``) and
  HetFedRep (``configs/flic/satellite_bands*.yaml``, ``configs/local/satellite_bands.yaml``).
* ``hyfem`` (Zhang, Yin, Chen & Hong, TMLR 2024): :class:`~fedhet.datamodules.HybridFederation` with the bands as
  blocks, 6 clients with 2-3 bands and 3 classes each, every client tested on **every** class restricted to its
  bands; HyFEM's client models and server model against stand-alone clients and the centralised model
  (``configs/hyfem/satellite_bands*.yaml``).

Reference points fitted with scikit-learn on the ``flic`` setting's exact splits (no tuning): a logistic regression
per client on its own bands (a Local estimate with no body to share) and one on every client's training samples with
**all four bands** tested on each client's test samples (what a model that saw every band and every sample gets, an
upper estimate for what sharing can add). Mean ± std over seeds; the seed drives the split and the training.

Run from the repository root: ``nice -n 19 python benchmarks/realdata_satellite.py --seeds 3``. Writes
``benchmarks/results/realdata_satellite.{csv,md}``.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from _common import RESULTS_DIR, environment, quiet_trainer, write_table
from _tables import percent_mean_std
from fedhet.datamodules.datasets.satellite import BANDS, load_satellite_table

ROOT = Path(__file__).parents[1]
FLIC_CONFIGS = {
    "FLIC-HL": "flic/satellite_bands",
    "Local (HetLocal)": "local/satellite_bands",
    "HetFedRep": "flic/satellite_bands_hetfedrep",
}
HYFEM_CONFIGS = {
    "HyFEM": "hyfem/satellite_bands",
    "stand-alone": "hyfem/satellite_bands_local",
    "centralised (all bands, pooled)": "hyfem/satellite_bands_centralised",
}


def instantiate(section: dict[str, Any], **overrides: Any) -> Any:
    """The object a config section names, with some ``init_args`` replaced."""
    module, _, name = section["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**{**section.get("init_args", {}), **overrides})


def load_config(name: str) -> dict[str, Any]:
    """A shipped config, parsed."""
    return yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())


def run_config(name: str, seed: int, rounds: int, root: Path) -> dict[str, float]:
    """Fit one shipped config with ``seed`` and ``rounds`` (its other trainer settings kept); test metrics."""
    config = load_config(name)
    settings = {key: config["trainer"][key] for key in ("local_epochs", "local_steps") if key in config["trainer"]}
    sampler = config["trainer"].get("sampler")
    if sampler is not None:
        settings["sampler"] = instantiate(sampler)
    trainer = quiet_trainer(rounds, seed, root / f"{name.replace('/', '_')}_{seed}", **settings)
    model = instantiate(config["model"])
    data = instantiate(config["data"], seed=seed)
    trainer.fit(model, data)
    return trainer.test(model, data)


def sklearn_references(seed: int) -> dict[str, list[float]]:
    """Per-client accuracies of the two scikit-learn reference points on the ``flic`` setting's splits."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    federation = instantiate(load_config(FLIC_CONFIGS["FLIC-HL"])["data"], seed=seed)
    rows = federation.split_rows
    x_all, y_all = (t.numpy() for t in load_satellite_table())
    out: dict[str, list[float]] = {"local": [], "all_bands": []}
    pooled_train = np.concatenate([parts["train"] for parts in rows.values()])
    scaler = StandardScaler().fit(x_all[pooled_train])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pooled = LogisticRegression(max_iter=3000).fit(scaler.transform(x_all[pooled_train]), y_all[pooled_train])
        for client_id, client in federation.clients.items():
            test = rows[client_id]["test"]
            train_x, train_y = client.train_dataset.x.numpy(), client.train_dataset.y.numpy()
            test_x, test_y = client.test_dataset.x.numpy(), client.test_dataset.y.numpy()
            local = LogisticRegression(max_iter=3000).fit(train_x, train_y)
            out["local"].append(float(local.score(test_x, test_y)))
            out["all_bands"].append(float(pooled.score(scaler.transform(x_all[test]), y_all[test])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--flic-rounds", type=int, default=10, help="rounds of the FLIC setting (configs: 10)")
    parser.add_argument("--hyfem-rounds", type=int, default=16, help="rounds of 32 steps, HyFEM setting (configs: 64)")
    parser.add_argument("--settings", nargs="+", default=["flic", "hyfem"], choices=["flic", "hyfem"])
    parser.add_argument("--methods", nargs="+", default=None, help="a subset of the methods (default: all)")
    parser.add_argument("--tag", default="realdata_satellite")
    args = parser.parse_args()

    # the two settings interleaved, each method before its baselines, so a cut-off run has the main comparisons first
    plan = sorted(
        (
            (setting, method, name)
            for setting in args.settings
            for method, name in (FLIC_CONFIGS if setting == "flic" else HYFEM_CONFIGS).items()
            if args.methods is None or method in args.methods
        ),
        key=lambda item: list((FLIC_CONFIGS if item[0] == "flic" else HYFEM_CONFIGS).values()).index(item[2]),
    )
    results: dict[tuple[str, str], list[dict[str, float]]] = {(setting, method): [] for setting, method, _ in plan}
    seconds: dict[tuple[str, str], list[float]] = {key: [] for key in results}
    references: list[dict[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):  # seed-major, so a cut-off run still has every method at its first seeds
            if "flic" in args.settings:
                references.append(sklearn_references(seed))
            for setting, method, name in plan:
                rounds = args.flic_rounds if setting == "flic" else args.hyfem_rounds
                start = time.perf_counter()
                results[setting, method].append(run_config(name, seed, rounds, Path(tmp)))
                seconds[setting, method].append(time.perf_counter() - start)
                print(
                    f"seed {seed} {setting} {method}: {results[setting, method][-1]['test/acc_mean']:.4f}", flush=True
                )
                write_results(args, results, seconds, references)
    print((RESULTS_DIR / f"{args.tag}.md").read_text())


def write_results(
    args: argparse.Namespace,
    results: dict[tuple[str, str], list[dict[str, float]]],
    seconds: dict[tuple[str, str], list[float]],
    references: list[dict[str, list[float]]],
) -> None:
    """Write the table of every method and reference point over the seeds finished so far."""
    flic_config = load_config(FLIC_CONFIGS["FLIC-HL"])
    flic_trainer, flic_model = flic_config["trainer"], flic_config["model"]["init_args"]
    rows: list[dict[str, Any]] = []
    for (setting, method), runs in results.items():
        if not runs:
            continue
        rows.append(
            {
                "setting": setting,
                "method": method,
                "rounds": args.flic_rounds if setting == "flic" else args.hyfem_rounds,
                "seeds": len(runs),
                "acc_mean": percent_mean_std([r["test/acc_mean"] for r in runs]),
                "acc_worst": percent_mean_std([r["test/acc_worst"] for r in runs]),
                "global_acc": percent_mean_std([r["test/global_acc"] for r in runs])
                if "test/global_acc" in runs[0]
                else "",
                "per_seed": " ".join(f"{100 * r['test/acc_mean']:.1f}" for r in runs),
                "seconds_per_run": f"{statistics.mean(seconds[setting, method]):.0f}",
            }
        )
    labels = {"local": "sklearn logistic per client (Local)", "all_bands": "sklearn logistic, all bands pooled"}
    for key, method in labels.items():
        if references:
            rows.append(
                {
                    "setting": "flic",
                    "method": method,
                    "rounds": "",
                    "seeds": len(references),
                    "acc_mean": percent_mean_std([statistics.mean(r[key]) for r in references]),
                    "acc_worst": percent_mean_std([min(r[key]) for r in references]),
                    "global_acc": "",
                    "per_seed": " ".join(f"{100 * statistics.mean(r[key]):.1f}" for r in references),
                    "seconds_per_run": "",
                }
            )
    notes = [
        f"Statlog Landsat Satellite, clients = sensors recording different bands of {list(BANDS)}; mean ± std over the"
        f" seeds finished (column `seeds`, of {args.seeds} asked). `flic`: 12 clients x 2 bands x 3 classes, FLIC's"
        f" networks, sampling r = 0.25 (all clients in the last round), {flic_trainer['local_epochs']} local epochs per"
        f" round, FLIC pre-training {flic_model['pretrain_epochs']} epochs; test accuracy (%) of"
        " every client's model on its own held-out samples. `hyfem`: 6 clients x 2-3 bands x 3 classes, rounds of 32"
        " SGD steps; client models tested on every class restricted to their bands (mean and worst client), the"
        " server model (`global`) on all bands. s/run: wall seconds on a shared machine.",
    ]
    columns = {
        "setting": "setting",
        "method": "method",
        "rounds": "rounds",
        "seeds": "seeds",
        "acc_mean": "mean client acc (%)",
        "acc_worst": "worst client acc (%)",
        "global_acc": "global model acc (%)",
        "per_seed": "per seed (mean client)",
        "seconds_per_run": "s/run",
    }
    title = "Landsat Satellite bands: FLIC and HyFEM against their baselines"
    write_table(args.tag, title, rows, columns, notes, environment())


if __name__ == "__main__":
    main()
