"""Client-parallel speed-up: the same federation on 2 CPU processes against 1, with identical results.

What runs:
    ``fedhet fit -c <config> --trainer.devices N`` for N = 1 and 2 (CPU, gloo), each in its own ``fedhet`` process
    tree with ``OMP_NUM_THREADS=1`` (one thread per process, the same float sums in every process), rounds set by
    ``--rounds``, ``--local-epochs`` local epochs (5 by default), no progress display, checkpoints off. The
    default config is FedPAC-style FedAvg on MNIST-5k
    (``configs/fedavg/mnist5k_dominant.yaml``: 20 clients, an MLP of 200 hidden units), work that is
    bound by the clients' local training. With 2 processes the clients of a round are split between the processes
    (round-robin by client index) and the uploads are gathered and aggregated in client order on both.

How it is measured:
    Seconds per round are the engine's ``time/round_s`` (rank 0's ``perf_counter`` span of a round: training,
    gathering, aggregation, evaluation), median over rounds ``1 .. R-1`` (round 0 builds the clients); the speed-up is
    the 1-process median over the 2-process one. Whole-command wall time (with process start-up and data loading) is
    given beside it. The metrics of the two runs (every logged column but the timings) are compared for equality.
    Nothing is asserted; the machine should be otherwise idle (2 processes need 2 free cores).

Usage::

    python benchmarks/processes.py                      # 12 rounds of configs/fedavg/mnist5k_dominant.yaml
    python benchmarks/processes.py --config configs/fedrep/digits.yaml --rounds 20

Results go to ``benchmarks/results/processes.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COLUMNS = {
    "config": "config",
    "rounds": "rounds",
    "local_epochs": "local epochs",
    "round_s_1": "1 process s/round",
    "round_s_2": "2 processes s/round",
    "speedup": "speed-up",
    "wall_s_1": "1 process wall s",
    "wall_s_2": "2 processes wall s",
    "identical": "metrics identical",
}


def run(config: Path, devices: int, rounds: int, epochs: int, root: Path) -> tuple[list[dict[str, str]], float]:
    """One ``fedhet fit``; its metrics rows and its wall seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "fedhet", "fit", "-c", str(config), "--trainer.devices", str(devices)]
    command += ["--trainer.rounds", str(rounds), "--trainer.local_epochs", str(epochs)]
    command += ["--trainer.default_root_dir", str(root)]
    command += ["--trainer.enable_progress_bar", "false", "--trainer.checkpoint_every", "0"]
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    rows = list(csv.DictReader((root / "logs" / "version_0" / "metrics.csv").open()))
    return rows, wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs/fedavg/mnist5k_dominant.yaml")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--local-epochs", type=int, default=5)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for devices in (1, 2):
            results[devices] = run(args.config, devices, args.rounds, args.local_epochs, Path(tmp) / f"d{devices}")
            print(f"{devices} process(es): {results[devices][1]:.1f} s", flush=True)

    def per_round(rows: list[dict[str, str]]) -> float:
        return statistics.median(float(r["time/round_s"]) for r in rows[1:])

    def comparable(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    (rows_1, wall_1), (rows_2, wall_2) = results[1], results[2]
    row = {
        "config": str(args.config.resolve().relative_to(ROOT)),
        "rounds": args.rounds,
        "local_epochs": args.local_epochs,
        "round_s_1": round(per_round(rows_1), 3),
        "round_s_2": round(per_round(rows_2), 3),
        "speedup": f"{per_round(rows_1) / per_round(rows_2):.2f}x",
        "wall_s_1": round(wall_1, 1),
        "wall_s_2": round(wall_2, 1),
        "identical": comparable(rows_1) == comparable(rows_2),
    }
    print(row)
    if not args.no_save:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _common import environment, write_table

        notes = ["Written by `benchmarks/processes.py` (its docstring explains the method). Target: >= 1.6x."]
        print(write_table("processes", "Client-parallel: 2 CPU processes vs 1", [row], COLUMNS, notes, environment()))


if __name__ == "__main__":
    main()
