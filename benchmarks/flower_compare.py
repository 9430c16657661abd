"""fedhet against Flower's simulation engine on the same FedAvg tasks: wall time, peak memory, final accuracy.

The tasks (each the same on both sides; both sides read the very same training tensors from one file):
    * ``cnn`` (the realistic workload): Fashion-MNIST shared as in FedPAC (Xu et al., ICLR 2023): 20 clients of 600
      training and 600 test images, 20% drawn from all classes and 80% from the 3 dominant classes of the client's
      group (``PartitionedFederation(partition="dominant")``), the paper's CNN (``_flower_task.cnn28_body``: two
      conv-pool blocks, ``Linear(800, 128)``, a linear head), ``--cnn-epochs`` local epochs (5 by default, as in the
      paper) of SGD (batch 50, lr 0.01, momentum 0.5, weight decay 5e-4) per round. Here the clients' computation
      dominates a round, as in real experiments.
    * ``tiny`` (framework overhead): scikit-learn digits over ``--clients`` clients (10 and 100 by default) with a
      Dirichlet(0.5) label skew (20% of each client held out for testing; at least 10 samples a client, 4 at 100
      clients), an MLP ``Linear(64, 64)-ReLU-Linear(64,
      10)``, one local epoch of SGD (batch 32, lr 0.05). A client-round is about a millisecond of computation, so
      this task measures what each framework spends per client and message, not training.

    Both: FedAvg with full participation for the task's rounds, aggregation weighted by the clients' numbers of
    training samples; initial weights are each side's own (seeded). Every client's shuffles are seeded on both
    sides: fedhet derives a seed per (seed, round, client); Flower's client seeds torch from (seed, round, partition)
    at the start of each ``fit`` (the round comes in the fit config), so its actors' results do not depend on which
    actor runs which client.

The sides:
    * **Flower**: ``benchmarks/_flower_side.py`` in a separate venv that this script creates on first use
      (``python -m venv`` + ``pip install torch==<this torch> "flwr[simulation]"``), ``flwr.simulation.run_simulation``
      with the Ray backend, a ``NumPyClient`` per client, the ``FedAvg`` strategy, ``--cpus`` CPUs for client actors
      (one CPU per actor, so that ``--cpus`` clients train at once). Ray is started by ``ray.init`` before
      ``run_simulation`` (which then reuses it), so its start-up is timed on its own.
    * **fedhet**: ``FederatedTrainer.fit(FedAvg(...), FederatedDataModule.from_tensors(...))`` with no logger,
      progress display or checkpoints, on 1 process and on ``--cpus`` processes (``devices``); the CNN task's FedAvg
      is ``FedAvg(network="cnn")``, the same CNN (``fedhet.modules.image_cnns.cnn28_body``).

What is measured:
    Each side runs as its own process tree, started by this script. ``wall`` is the whole command (interpreter
    start-up, imports, Ray or Fabric start, training); ``Ray start`` is ``ray.init`` alone; ``training call`` is the
    span around ``run_simulation`` or ``fit`` alone, measured inside (for Flower it still holds starting the client
    actors). Peak memory is the largest sum of the resident set sizes of the whole process tree (the Ray workers
    included), sampled every 50 ms from ``/proc``. ``CPU`` is the user + system CPU time of the whole command's process
    tree (every process seen in the samples, Ray's workers and Fabric's second process included, each its own last
    reading), which other jobs on a shared machine inflate far less than wall time.
    Accuracy: both sides write their final global weights; this script
    evaluates them the same way, as mean client accuracy on the clients' test splits. ``--seeds`` repeats
    everything; the table gives means and, for the training call's ratio, the range over seeds. Nothing is asserted.

Usage::

    python benchmarks/flower_compare.py                                  # cnn (20 clients) and tiny (10, 100)
    python benchmarks/flower_compare.py --workloads tiny --clients 10 --rounds 100 --seeds 3
    python benchmarks/flower_compare.py --workloads cnn --cnn-rounds 3 --flower-venv ~/flower-venv

Results go to ``benchmarks/results/flower_compare.csv`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
sys.path.insert(0, str(HERE))
from _flower_task import mean_client_accuracy  # noqa: E402

COLUMNS = {
    "workload": "workload",
    "clients": "clients",
    "rounds": "rounds",
    "local_epochs": "local epochs",
    "side": "run",
    "wall_s": "whole command s",
    "ray_start_s": "Ray start s",
    "sim_s": "training call s",
    "sim_ratio": "training call / fedhet 1 process",
    "wall_ratio": "whole command / fedhet 1 process",
    "cpu_s": "CPU s (process tree)",
    "cpu_ratio": "CPU / fedhet 1 process",
    "peak_mb": "peak RSS MB (process tree)",
    "acc": "mean client test acc",
}
TINY = {"network": "mlp", "hidden": 64, "lr": 0.05, "momentum": 0.0, "weight_decay": 0.0, "batch_size": 32}
CNN = {"network": "cnn", "lr": 0.01, "momentum": 0.5, "weight_decay": 5e-4, "batch_size": 50}


# ------------------------------------------------------------------------------------------------ the shared task
def write_task(path: Path, workload: str, num_clients: int, rounds: int, epochs: int, seed: int) -> tuple[dict, list]:
    """Write the clients' training tensors and the settings; return the clients' test tensors (kept here)."""
    from fedhet.datamodules import DigitsFederation, PartitionedFederation

    if workload == "cnn":
        federation = PartitionedFederation(
            data="fashion_mnist",
            num_clients=num_clients,
            partition="dominant",
            partition_args={"samples_per_client": 1200, "uniform_fraction": 0.2},
            val_fraction=0.0,
            test_fraction=0.5,
            seed=seed,
        )
        settings = CNN
    else:
        federation = DigitsFederation(
            num_clients=num_clients,
            alpha=0.5,
            min_samples=min(10, 1797 // (4 * num_clients)),  # 100 clients of 1,797 digits: at least 4 each
            val_fraction=0.0,
            test_fraction=0.2,
            seed=seed,
        )
        settings = TINY
    federation.setup("fit")
    clients = list(federation.clients.values())
    task = {
        **settings,
        "clients": [(c.train_dataset.x.clone(), c.train_dataset.y.clone()) for c in clients],
        "num_features": clients[0].train_dataset.x[0].numel(),
        "num_classes": 10,
        "local_epochs": epochs,
        "rounds": rounds,
        "seed": seed,
    }
    torch.save(task, path)
    return task, [(c.test_dataset.x, c.test_dataset.y) for c in clients]


# ------------------------------------------------------------------------------------------------ the fedhet side
def fedavg_for(task: dict):
    """The FedAvg of fedhet with the task's network (``network="cnn"``: FedPAC's CNN) and optimiser settings."""
    from fedhet.modules import FedAvg

    hidden = [task["hidden"]] if task["network"] == "mlp" else [64]
    return FedAvg(
        hidden_dims=hidden,
        network=task["network"],
        lr=task["lr"],
        momentum=task["momentum"],
        weight_decay=task["weight_decay"],
    )


def run_fedhet_side(task_path: Path, out: Path, devices: int) -> None:
    """Fedhet's FedAvg on the task; writes the final global weights and the seconds of ``fit`` (rank 0)."""
    from _common import quiet_trainer
    from fedhet.datamodules import FederatedDataModule
    from fedhet.plugins import Processes

    torch.set_num_threads(1)
    task = torch.load(task_path, weights_only=True)
    tensors = {f"client_{i:03d}": xy for i, xy in enumerate(task["clients"])}
    federation = FederatedDataModule.from_tensors(
        tensors, num_classes=task["num_classes"], batch_size=task["batch_size"], val_fraction=0.0, test_fraction=0.0
    )
    trainer = quiet_trainer(
        task["rounds"],
        seed=task["seed"],
        root=out.parent / f"fedhet{devices}",
        processes=Processes(accelerator="cpu", devices=devices),
        local_epochs=task["local_epochs"],
    )
    model = fedavg_for(task)
    start = time.perf_counter()
    trainer.fit(model, federation)
    seconds = time.perf_counter() - start
    if trainer.is_global_zero:
        torch.save({"weights": dict(trainer.server_state.shared), "seconds": seconds}, out)


# ---------------------------------------------------------------------------------------------------- measuring
def tree_sample(root_pid: int) -> tuple[float, dict[int, float]]:
    """The resident set size (MiB) of ``root_pid`` and all its descendants, and each one's own CPU seconds so far.

    From ``/proc/<pid>/stat``: resident pages, and ``utime + stime`` (the process's own CPU time, not that of the
    children it has waited for, so that no CPU second is counted twice).
    """
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            pid = int(entry.name)
            rss[pid] = int(fields[21])  # resident pages
            cpu[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime
            children.setdefault(int(fields[1]), []).append(pid)
        except (OSError, IndexError, ValueError):
            continue
    total, tree, stack = 0, {}, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        if pid in cpu:
            tree[pid] = cpu[pid]
        stack += children.get(pid, [])
    return total * PAGE_BYTES / 2**20, tree


def measured(command: list[str]) -> tuple[float, float, float]:
    """Run ``command``; return its wall seconds, the peak RSS of its process tree in MiB and the tree's CPU seconds.

    The tree is sampled every 50 ms: the CPU time is the sum over every process seen of the last CPU time read for
    it, so a process's last 50 ms (or a process that lives less than that) may be missed.
    """
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0.0]
    cpu: dict[int, float] = {}

    def sample() -> None:
        while process.poll() is None:
            rss, tree = tree_sample(process.pid)
            peak[0] = max(peak[0], rss)
            cpu.update(tree)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed:\n{stderr[-3000:]}")
    return wall, peak[0], sum(cpu.values())


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


def sides(args: argparse.Namespace, flower: Path) -> dict[str, object]:
    """Each side's command, given the task file and the output file."""
    fedhet = [sys.executable, __file__, "--role", "fedhet"]
    commands = {"fedhet, 1 process": lambda task, out: [*fedhet, "--task", task, "--out", out]}
    if args.fedhet_processes:
        commands[f"fedhet, {args.cpus} processes"] = lambda task, out: [
            *[*fedhet, "--task", task, "--out", out, "--devices", str(args.cpus)]
        ]
    commands[f"Flower, {args.cpus} CPUs"] = lambda task, out: [
        *[str(flower), str(HERE / "_flower_side.py"), "--task", task, "--out", out, "--cpus", str(args.cpus)]
    ]
    return commands


def measure(args: argparse.Namespace, flower: Path, workload: str, clients: int, rounds: int, epochs: int) -> list:
    """The table's rows for one workload and size: every side, ``--seeds`` times."""
    commands = sides(args, flower)
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in commands}
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            task_path = Path(tmp) / "task.pt"
            task, test = write_task(task_path, workload, clients, rounds, epochs, seed)
            for side, command in commands.items():
                out = Path(tmp) / f"{len(runs[side])}_{side.split()[0].strip(',')}.pt"
                wall, peak, cpu = measured(command(str(task_path), str(out)))
                result = torch.load(out, weights_only=True)
                acc = mean_client_accuracy(task, result["weights"], test)
                runs[side].append(
                    {
                        "wall_s": wall,
                        "cpu_s": cpu,
                        "ray_start_s": result.get("ray_start_seconds", float("nan")),
                        "sim_s": result["seconds"],
                        "peak_mb": peak,
                        "acc": acc,
                    }
                )
                print(f"{workload} {clients} clients, seed {seed}, {side}: {runs[side][-1]}", flush=True)
    base = runs["fedhet, 1 process"]
    rows = []
    for side, results in runs.items():
        sim_ratios = [r["sim_s"] / b["sim_s"] for r, b in zip(results, base, strict=True)]
        row = {"workload": workload if workload == "cnn" else "tiny (framework overhead)", "clients": clients}
        row |= {"rounds": rounds, "local_epochs": epochs, "side": side}
        for key in ("wall_s", "cpu_s", "ray_start_s", "sim_s", "peak_mb", "acc"):
            value = statistics.mean(r[key] for r in results)
            row[key] = "" if value != value else round(value, 3 if key == "acc" else 1)  # NaN: not this side's
        row["sim_ratio"] = f"{statistics.median(sim_ratios):.2f}x" + (
            f" ({min(sim_ratios):.2f}-{max(sim_ratios):.2f})" if len(sim_ratios) > 1 else ""
        )
        for key in ("wall", "cpu"):
            mine, theirs = (statistics.mean(r[f"{key}_s"] for r in side_runs) for side_runs in (results, base))
            row[f"{key}_ratio"] = f"{mine / theirs:.2f}x"
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=["cnn", "tiny"], default=["cnn", "tiny"])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100], help="clients of the tiny workload")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the tiny workload")
    parser.add_argument("--cnn-clients", type=int, default=20)
    parser.add_argument("--cnn-rounds", type=int, default=3)
    parser.add_argument("--cnn-epochs", type=int, default=5, help="local epochs of the CNN workload")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=2, help="Ray CPUs for Flower, processes for fedhet's 2nd run")
    parser.add_argument("--flower-venv", type=Path, default=Path("fedhet_runs/benchmarks/flower-venv"))
    parser.add_argument(
        "--no-fedhet-processes",
        dest="fedhet_processes",
        action="store_false",
        help="leave out fedhet on --cpus processes",
    )
    parser.add_argument("--name", default="flower_compare", help="results file name (without extension)")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--role", choices=["fedhet"], help=argparse.SUPPRESS)
    parser.add_argument("--task", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "fedhet":
        run_fedhet_side(args.task, args.out, args.devices)
        return

    flower = flower_python(args.flower_venv.absolute())
    rows = []
    if "cnn" in args.workloads:
        rows += measure(args, flower, "cnn", args.cnn_clients, args.cnn_rounds, args.cnn_epochs)
    if "tiny" in args.workloads:
        for clients in args.clients:
            rows += measure(args, flower, "tiny", clients, args.rounds, 1)
    for row in rows:
        print(row)
    if not args.no_save:
        from _common import environment, write_table

        notes = [
            "Written by `benchmarks/flower_compare.py` (its docstring explains the method). FedAvg, full"
            f" participation, means over {args.seeds} seed(s); the same training tensors on every side. `cnn`: the"
            " FedPAC paper's Fashion-MNIST CNN and partition (realistic: computation dominates); `tiny`: a digits MLP"
            " with ~1 ms of computation per client-round, so it measures framework overhead per client and message.",
            f"Flower: {flower_version(flower)}; Ray is started before `run_simulation` and timed on its own (`Ray"
            " start`), the training call still starts the client actors. The machine (2 cores) was shared with other"
            " jobs: compare within a row group (the sides of one workload ran back to back).",
        ]
        print(write_table(args.name, "fedhet vs Flower simulation", rows, COLUMNS, notes, environment()))


def flower_version(python: Path) -> str:
    """``flwr`` and ``ray`` versions in the Flower venv."""
    code = "import flwr, ray; print(f'flwr {flwr.__version__}, ray {ray.__version__}')"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    main()
