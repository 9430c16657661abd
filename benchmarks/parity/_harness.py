"""What the parity scripts share: the setting, fedhet's client tensors, a timed fedhet run, the results table.

Every parity script runs fedhet and one or more independent implementations on the **same client tensors**: the
federation is built once by fedhet (:class:`~fedhet.datamodules.PartitionedFederation`, so the partition and the
train/test split are fedhet's), then each client's train and test tensors are handed to the other code in its own
format. Reported per run: the unweighted mean of the clients' test accuracies after the last round (every client's
personalised model: shared part from the server, personal part as the method leaves it), and CPU seconds per round
(``time.process_time`` of the whole process, one torch thread).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/_common.py

from _common import environment, quiet_trainer, write_table  # noqa: E402
from fedhet.callbacks.base import FederatedCallback  # noqa: E402
from fedhet.datamodules import PartitionedFederation  # noqa: E402
from fedhet.modules.blocks import mlp  # noqa: E402
from fedhet.modules.image_cnns import FEATURE_DIM, cnn28_body  # noqa: E402
from fedhet.plugins import ClientStates  # noqa: E402


@dataclass(frozen=True)
class Setting:
    """One federated task and training recipe, identical on every side of a comparison.

    Defaults: FedPAC's Fashion-MNIST task (Xu et al., ICLR 2023, section 5.1) at a reduced budget: 20 clients in 5
    groups, 20% of each client's 1,200 samples over all classes and 80% over its group's 3 dominant classes, half for
    training and half for testing; an MLP body 784 -> 128 (ReLU; the paper's feature width d = 128) and a linear head
    (``network="cnn"``: the paper's CNN, several times costlier on CPU); SGD with momentum 0.5 and weight decay 5e-4,
    batch 50.

    Attributes:
        data: name of fedhet's pooled dataset.
        clients: number of clients.
        samples: samples per client (train + test).
        test_fraction: share of each client's samples held out for testing.
        network: ``"mlp"`` or ``"cnn"`` (the body; the head is ``Linear(128, 10)``).
        rounds: communication rounds (full participation).
        local_epochs: body (or whole-model) epochs per round.
        head_epochs: head epochs per round, for the methods that train the head first.
        lr: learning rate of the body (of the whole model for FedAvg-like methods).
        head_lr: learning rate of the head phase where a method has one.
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        batch_size: training batch size.

    """

    data: str = "fashion_mnist"
    clients: int = 20
    samples: int = 1200
    test_fraction: float = 0.5
    network: str = "mlp"
    rounds: int = 20
    local_epochs: int = 2
    head_epochs: int = 1
    lr: float = 0.05
    head_lr: float = 0.1
    momentum: float = 0.5
    weight_decay: float = 5e-4
    batch_size: int = 50


@dataclass
class ClientTensors:
    """One client's exact data as fedhet splits it.

    Attributes:
        client_id: fedhet's client id.
        x_train: training features ``(N_train, 1, 28, 28)``.
        y_train: training labels ``(N_train,)``.
        x_test: test features ``(N_test, 1, 28, 28)``.
        y_test: test labels ``(N_test,)``.

    """

    client_id: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass
class RunResult:
    """One run of one implementation.

    Attributes:
        implementation: who ran it (``fedhet``, ``PFLlib``, ...).
        method: the method's name.
        seed: the seed of the partition and of the run.
        accuracy: unweighted mean client test accuracy after the last round, in percent.
        cpu_per_round: CPU seconds per round.
        note: anything else the reference reports (e.g. its own printed accuracy).

    """

    implementation: str
    method: str
    seed: int
    accuracy: float
    cpu_per_round: float
    note: str = ""


WORKLOAD = "none: the script builds its workload from fedhet's data and the references' recipe (docstring); no suite"
"""What a parity table's footer names as its config: each script sets its data, model and budget in code."""


def body_and_head(setting: Setting) -> tuple[nn.Module, nn.Linear]:
    """The body every side uses (fedhet's own builders: ``mlp(784, [128])`` or the paper's CNN) and a linear head."""
    body = cnn28_body() if setting.network == "cnn" else mlp(28 * 28, [FEATURE_DIM])[0]
    return body, nn.Linear(FEATURE_DIM, 10)


def federation(setting: Setting, seed: int) -> PartitionedFederation:
    """The federation of ``setting`` for ``seed``, built by fedhet (FedPAC's dominant-class partition)."""
    return PartitionedFederation(
        data=setting.data,
        num_clients=setting.clients,
        partition="dominant",
        partition_args={"samples_per_client": setting.samples, "uniform_fraction": 0.2},
        test_fraction=setting.test_fraction,
        batch_size=setting.batch_size,
        seed=seed,
    )


def client_tensors(data: PartitionedFederation) -> list[ClientTensors]:
    """Every client's train and test tensors, in fedhet's client order (the order the references number them)."""
    data.setup("fit")
    out = []
    for cid in data.client_ids:
        client = data.client(cid)
        train, test = client.train_dataset, client.test_dataset
        out.append(ClientTensors(cid, train.x.clone(), train.y.clone(), test.x.clone(), test.y.clone()))
    return out


class RoundClock(FederatedCallback):
    """CPU seconds of each round of a fedhet run (``on_round_start`` to ``on_round_end``)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_round_start(self, trainer: Any, round_idx: int, client_ids: list[str]) -> None:
        """Start the round's clock."""
        self._start = time.process_time()

    def on_round_end(self, trainer: Any, round_idx: int, metrics: dict[str, float]) -> None:
        """Stop it."""
        self.seconds.append(time.process_time() - self._start)


def run_fedhet(
    method: str,
    build: Callable[[], LightningModule],
    setting: Setting,
    seed: int,
    root: Path,
    personal_init: str = "shared",
) -> RunResult:
    """Train ``build()`` on the federation of ``seed`` and test every client's personalised model.

    ``personal_init="per_client"`` draws each client's personal layers from its own seed instead of the one shared
    initialisation (fedhet's default, as the papers and the references do); the run is then labelled with it. CPU
    seconds per round leave out the last round, which also evaluates every client.
    """
    torch.manual_seed(seed)
    clock = RoundClock()
    label = method if personal_init == "shared" else f"{method} (personal_init={personal_init})"
    trainer = quiet_trainer(
        setting.rounds,
        seed,
        root / f"{label}_{seed}".replace(" ", "_"),
        local_epochs=setting.local_epochs,
        callbacks=[clock],
        client_state=ClientStates(personal_init=personal_init),
    )
    data = federation(setting, seed)
    model = build()
    trainer.fit(model, data)
    accuracy = 100 * trainer.test(model, data)["test/acc_mean"]
    rounds = clock.seconds[:-1] or clock.seconds
    return RunResult("fedhet", label, seed, accuracy, statistics.fmean(rounds))


def reference_kind(checkout: Path, kinds: dict[str, str]) -> str:
    """Which reference ``checkout`` is, from a file only that repository has (``kinds``: marker path -> name)."""
    for marker, name in kinds.items():
        if (checkout / marker).is_file():
            return name
    known = ", ".join(f"{name} (has {marker})" for marker, name in kinds.items())
    raise SystemExit(f"--reference-dir {checkout}: not a checkout this script knows; expected one of {known}")


def base_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments every parity script takes: references, seeds and the budget."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--reference-dir",
        type=Path,
        action="append",
        default=[],
        help="a checkout of a reference implementation (repeat for several); see the docstring for how to get it",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rounds", type=int, default=Setting.rounds)
    parser.add_argument("--local-epochs", type=int, default=Setting.local_epochs)
    parser.add_argument("--network", choices=["mlp", "cnn"], default=Setting.network)
    parser.add_argument("--lr", type=float, default=Setting.lr, help="body learning rate (head: 0.1 for FedPAC)")
    parser.add_argument("--sides", nargs="+", default=None, help="run only these sides (default: all)")
    parser.add_argument("--root", type=Path, default=Path("fedhet_runs/parity"), help="fedhet's run folders")
    parser.add_argument(
        "--table-only", action="store_true", help="write the table from the runs already recorded under --root"
    )
    return parser


def record(result: Any, root: Path, name: str) -> None:
    """Append one run (a dataclass) to ``<root>/<name>.jsonl`` (several processes may each run some sides and seeds)."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.jsonl").open("a") as f:
        f.write(json.dumps(asdict(result)) + "\n")
    print(result, flush=True)


def recorded(root: Path, name: str, kind: Callable[..., Any] = RunResult) -> list[Any]:
    """The runs recorded by :func:`record`, the latest one of each (implementation, method, seed).

    ``kind`` is the dataclass the runs were recorded as (:class:`RunResult` unless a script records its own).
    """
    import json

    runs: dict[tuple[str, str, int], Any] = {}
    for line in (root / f"{name}.jsonl").read_text().splitlines():
        run = kind(**json.loads(line))
        runs[(run.implementation, run.method, run.seed)] = run
    return sorted(runs.values(), key=lambda r: (r.implementation != "fedhet", r.implementation, r.method, r.seed))


def summarise(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    """One row per (implementation, method): accuracy mean ± std and per seed, CPU seconds per round."""
    rows = []
    keys = list(dict.fromkeys((r.implementation, r.method) for r in results))
    for implementation, method in keys:
        runs = [r for r in results if (r.implementation, r.method) == (implementation, method)]
        accs = [r.accuracy for r in runs]
        std = statistics.stdev(accs) if len(accs) > 1 else float("nan")
        rows.append(
            {
                "implementation": implementation,
                "method": method,
                "seeds": len(runs),
                "accuracy": f"{statistics.fmean(accs):.2f} ± {std:.2f}" if len(accs) > 1 else f"{accs[0]:.2f}",
                "per_seed": ", ".join(f"{a:.2f}" for a in accs),
                "cpu_per_round": f"{statistics.fmean(r.cpu_per_round for r in runs):.2f}",
                "note": "; ".join(dict.fromkeys(r.note for r in runs if r.note)),
            }
        )
    return rows


def recorded_command(command: str, references: dict[str, Path]) -> str:
    """``command`` as a results file records it, without this machine's paths.

    Each reference checkout's path becomes ``<name checkout>`` and an absolute ``--root`` ``<runs root>``.
    """
    for kind, path in references.items():
        command = command.replace(str(path), f"<{kind} checkout>")
    return re.sub(r"--root /\S+", "--root <runs root>", command)


def write_results(
    name: str,
    title: str,
    setting: Setting,
    results: Sequence[RunResult],
    notes: Sequence[str],
    references: dict[str, Path],
) -> str:
    """The side-by-side table (``benchmarks/results/<name>.{csv,md}``) with the setting and the references used.

    ``references`` maps each reference's name to its checkout; the footer names their commits, and the recorded
    command hides this machine's paths (:func:`recorded_command`).
    """
    import csv

    env = environment(config=WORKLOAD)
    env["command"] = recorded_command(env["command"], references)
    used = "; ".join(f"{kind} at commit {git_commit(path)}" for kind, path in references.items()) or "none"

    text = write_table(
        name,
        title,
        summarise(results),
        {
            "implementation": "implementation",
            "method": "method",
            "seeds": "seeds",
            "accuracy": "final mean client test accuracy (%)",
            "per_seed": "per seed",
            "cpu_per_round": "CPU s / round",
            "note": "note",
        },
        notes=[
            f"Setting: {', '.join(f'{k}={v}' for k, v in asdict(setting).items())}.",
            f"References: {used}.",
            "",
            *notes,
        ],
        env=env,
    )
    runs_csv = Path(__file__).resolve().parents[1] / "results" / f"{name}_runs.csv"
    with runs_csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(results[0])))
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
    return text


def git_commit(checkout: Path) -> str:
    """The commit of a reference checkout (``unknown`` when it is not a git work tree)."""
    import subprocess

    try:
        return subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
