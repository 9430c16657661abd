"""fedhet against Flower's simulation engine on the same FedAvg task: wall time, peak memory, final accuracy.

The task (the same on both sides):
    scikit-learn digits shared over ``--clients`` clients with a Dirichlet(0.5) label skew (``DigitsFederation``,
    seeded; 20% of each client held out for testing), an MLP ``Linear(64, 64)-ReLU-Linear(64, 10)``, FedAvg with
    full participation for ``--rounds`` rounds, one local epoch of shuffled SGD minibatches (batch 32, lr 0.05),
    aggregation weighted by the clients' numbers of training samples. Both sides read the very same training tensors
    from one file; initial weights and shuffles are each side's own (seeded).

The two sides:
    * **Flower**: ``benchmarks/_flower_side.py`` in a separate venv that this script creates on first use
      (``python -m venv`` + ``pip install torch==<this torch> "flwr[simulation]"``), ``flwr.simulation.run_simulation``
      with the Ray backend, a ``NumPyClient`` per client, the ``FedAvg`` strategy, ``--cpus`` CPUs for client actors
      (one CPU per actor, so that many clients train at once).
    * **fedhet**: ``FederatedTrainer.fit(FedAvg(hidden_dims=[64]), FederatedDataModule.from_tensors(...))`` with no
      logger, progress display or checkpoints, on 1 process and on ``--cpus`` processes (``devices``).

What is measured:
    Each side runs as its own process tree, started by this script. ``wall`` is the whole command (interpreter
    start-up, imports, Ray or Fabric start, training); ``sim`` is the span around the training call alone
    (``run_simulation`` or ``fit``) measured inside. Peak memory is the largest sum of the resident set sizes of the
    whole process tree (the Ray workers included), sampled every 50 ms from ``/proc``. Accuracy: both sides write
    their final global weights; this script evaluates them the same way, as mean client accuracy on the clients'
    test splits. ``--seeds`` repeats everything; the table gives means. Nothing is asserted.

Usage::

    python benchmarks/flower_compare.py                       # 10 clients, 100 rounds, 3 seeds
    python benchmarks/flower_compare.py --clients 50 --rounds 20 --seeds 1 --flower-venv ~/flower-venv

Results go to ``benchmarks/results/flower_compare.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
HIDDEN, LR, BATCH_SIZE, LOCAL_EPOCHS = 64, 0.05, 32, 1

COLUMNS = {
    "side": "run",
    "wall_s": "wall s (whole command)",
    "sim_s": "training call s",
    "peak_mb": "peak RSS MB (process tree)",
    "acc": "mean client test acc",
    "wall_ratio": "wall / fedhet 1 process",
}


# ------------------------------------------------------------------------------------------------ the shared task
def write_task(path: Path, num_clients: int, rounds: int, seed: int) -> dict[str, list]:
    """Write the clients' training tensors and the settings; return the clients' test tensors (kept here)."""
    from fedhet.datamodules import DigitsFederation

    federation = DigitsFederation(num_clients=num_clients, alpha=0.5, val_fraction=0.0, test_fraction=0.2, seed=seed)
    federation.setup("fit")
    clients = list(federation.clients.values())
    task = {
        "clients": [(c.train_dataset.x.clone(), c.train_dataset.y.clone()) for c in clients],
        "num_features": 64,
        "num_classes": 10,
        "hidden": HIDDEN,
        "lr": LR,
        "batch_size": BATCH_SIZE,
        "local_epochs": LOCAL_EPOCHS,
        "rounds": rounds,
        "seed": seed,
    }
    torch.save(task, path)
    return {"test": [(c.test_dataset.x, c.test_dataset.y) for c in clients]}


def mean_client_accuracy(weights: list[torch.Tensor], test: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Accuracy of the MLP with ``weights`` (``body.1.weight, body.1.bias, head.weight, head.bias``), client mean."""
    w1, b1, w2, b2 = weights
    accuracies = []
    for x, y in test:
        logits = torch.relu(x.flatten(1) @ w1.T + b1) @ w2.T + b2
        accuracies.append((logits.argmax(1) == y).float().mean().item())
    return sum(accuracies) / len(accuracies)


# ------------------------------------------------------------------------------------------------ the fedhet side
def run_fedhet_side(task_path: Path, out: Path, devices: int) -> None:
    """Fedhet's FedAvg on the task; writes the final global weights and the seconds of ``fit`` (rank 0)."""
    sys.path.insert(0, str(HERE))
    from _common import quiet_trainer
    from fedhet.datamodules import FederatedDataModule
    from fedhet.modules import FedAvg

    torch.set_num_threads(1)
    task = torch.load(task_path, weights_only=True)
    tensors = {f"client_{i:03d}": xy for i, xy in enumerate(task["clients"])}
    federation = FederatedDataModule.from_tensors(
        tensors, num_classes=task["num_classes"], batch_size=task["batch_size"], val_fraction=0.0, test_fraction=0.0
    )
    trainer = quiet_trainer(task["rounds"], seed=task["seed"], root=out.parent / f"fedhet{devices}", devices=devices)
    model = FedAvg(hidden_dims=[task["hidden"]], lr=task["lr"])
    start = time.perf_counter()
    trainer.fit(model, federation)
    seconds = time.perf_counter() - start
    if trainer.is_global_zero:
        shared = trainer.server_state.shared
        names = ["body.1.weight", "body.1.bias", "head.weight", "head.bias"]
        torch.save({"weights": [shared[n] for n in names], "seconds": seconds}, out)


# ---------------------------------------------------------------------------------------------------- measuring
def tree_rss_mb(root_pid: int) -> float:
    """Sum of the resident set sizes of ``root_pid`` and all its descendants, from ``/proc``."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            rss[int(entry.name)] = int(fields[21])  # resident pages
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total * 4096 / 2**20


def measured(command: list[str]) -> tuple[float, float]:
    """Run ``command``; return its wall seconds and the peak RSS of its process tree in MiB."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0.0]

    def sample() -> None:
        while process.poll() is None:
            peak[0] = max(peak[0], tree_rss_mb(process.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed:\n{stderr[-3000:]}")
    return wall, peak[0]


def flower_python(venv: Path) -> Path:
    """The Flower venv's interpreter, creating the venv (torch of this version + flwr[simulation]) if needed."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating the Flower venv in {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}"], check=True)
        subprocess.run([*pip, "flwr[simulation]"], check=True)
    return python


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2, help="Ray CPUs for Flower, processes for fedhet's 2nd run")
    parser.add_argument("--flower-venv", type=Path, default=Path("fedhet_runs/benchmarks/flower-venv"))
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--role", choices=["fedhet"], help=argparse.SUPPRESS)
    parser.add_argument("--task", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "fedhet":
        run_fedhet_side(args.task, args.out, args.devices)
        return

    flower = flower_python(args.flower_venv.resolve())
    sides = {
        "fedhet, 1 process": lambda task, out: [
            sys.executable,
            __file__,
            "--role",
            "fedhet",
            "--task",
            task,
            "--out",
            out,
        ],
        f"fedhet, {args.cpus} processes": lambda task, out: [
            *[sys.executable, __file__, "--role", "fedhet", "--task", task, "--out", out],
            *["--devices", str(args.cpus)],
        ],
        f"Flower {args.cpus} CPUs": lambda task, out: [
            *[str(flower), str(HERE / "_flower_side.py"), "--task", task, "--out", out],
            *["--cpus", str(args.cpus)],
        ],
    }
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            task_path = Path(tmp) / "task.pt"
            test = write_task(task_path, args.clients, args.rounds, seed)["test"]
            for side, command in sides.items():
                out = Path(tmp) / f"{len(runs[side])}_{side.split()[0].strip(',')}.pt"
                wall, peak = measured(command(str(task_path), str(out)))
                result = torch.load(out, weights_only=True)
                acc = mean_client_accuracy(result["weights"], test)
                runs[side].append({"wall_s": wall, "sim_s": result["seconds"], "peak_mb": peak, "acc": acc})
                print(f"seed {seed} {side}: {runs[side][-1]}", flush=True)

    reference = statistics.mean(r["wall_s"] for r in runs["fedhet, 1 process"])
    rows = []
    for side, results in runs.items():
        row = {"side": side}
        for key in ("wall_s", "sim_s", "peak_mb", "acc"):
            row[key] = round(statistics.mean(r[key] for r in results), 3 if key == "acc" else 1)
        row["wall_ratio"] = f"{statistics.mean(r['wall_s'] for r in results) / reference:.2f}x"
        rows.append(row)
    print(rows)
    if not args.no_save:
        sys.path.insert(0, str(HERE))
        from _common import environment, write_table

        notes = [
            f"Written by `benchmarks/flower_compare.py` (its docstring explains the method): {args.clients} clients,"
            f" {args.rounds} FedAvg rounds, full participation, 1 local epoch, mean over {args.seeds} seed(s).",
            f"Flower {flower_version(flower)} with Ray; the same training tensors on every side.",
        ]
        print(write_table("flower_compare", "fedhet vs Flower simulation", rows, COLUMNS, notes, environment()))


def flower_version(python: Path) -> str:
    """``flwr`` and ``ray`` versions in the Flower venv."""
    code = "import flwr, ray; print(f'flwr {flwr.__version__}, ray {ray.__version__}')"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    main()
