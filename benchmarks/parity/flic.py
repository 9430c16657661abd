"""FLIC parity: fedhet against the FLIC authors' code, on the same client tensors of the linear-mapping toy.

Rakotomamonjy, Vono, Medina Ruiz & Ralaivola, "Personalised Federated Learning On Heterogeneous Feature Spaces",
TMLR 2024. The federation is fedhet's :class:`~fedhet.datamodules.LinearMappingToy` (20 Gaussian classes in 5
dimensions, 3 classes per client, each client seeing them through its own Gaussian matrix to 3..100 features; the
paper's appendix S3.1.1, their ``get_toy_3``), built once per seed; every client's train and test tensors are handed
to their scripts. Both sides then run the reference code's recipe, which fedhet exposes as options of
:class:`~fedhet.modules.FLIC` (spec ``flic.md`` §3-4):

* embedding ``k_i -> 64 -> 64 -> 64`` (ReLU), FLIC-Class: a personal ``Linear(64, C)``; FLIC-HL: a shared
  ``Linear(64, 100)`` + LeakyReLU and a personal ``Linear(100, C)``; anchors ``N(v_c, e I)``, ``v_c ~ N(0, 10^2 I)``,
  both Gaussians of the W2 term estimated from samples (``anchor_variance=e``, ``anchor_stats="sampled"``);
* pre-training of every embedding on the W2 term alone for ``--align-epochs`` at batch ``--align-batch-size``, Adam
  ``--align-lr`` (theirs: every client before round 0; fedhet: at a client's first participation);
* ``--rounds`` rounds with ``--fraction`` of the clients, then one more with every client (their protocol; fedhet:
  ``rounds + 1`` with ``full_last_round``); per round ``--local-epochs`` epochs at batch 100 (FLIC-HL: the last one on
  the shared layer only, from round 0: their ``--start_optimize_rep -1``), Adam 1e-3 with weight decay 1e-3 on the
  classifier's weight matrices, lambda1 = lambda2 = 1e-3, the anchors' per-batch Adam step (lr 1e-3) on a local copy,
  averaged by the server; the last round trains the personal parts for max(10, local epochs - 1) epochs;
* no re-alignment between rounds (their ``--align_epochs_altern 0``; their default 1 re-aligns every client after
  every round, also after the last one: the side ``authors (re-align)`` runs it);
* Local: each client's own network, trained only when sampled (theirs ``MLP k_i -> 64 -> 64 -> C`` with Adam 1e-3 and
  weight decay 1e-4 on every weight matrix; fedhet's :class:`~fedhet.modules.HetLocal`, FLIC's embedding and a
  linear head, weight decay 1e-4 on the head).

Reference (never copied here; pass the checkout with ``--reference-dir``): ``git clone
https://github.com/arakotom/flic`` (used: commit 4646796, 2024-04-12). Their scripts need ``pandas`` and
``scikit-learn`` (``pip install pandas`` where the environment lacks it: a need of theirs, not of fedhet);
torchvision is not needed (the adapter stands in for their data module).

Run from the repository root, e.g.::

    nice -n 19 python benchmarks/parity/flic.py --reference-dir ../flic --seeds 0 1

Writes ``benchmarks/results/parity_flic.{md,csv}`` and ``parity_flic_runs.csv`` (one row per run); ``--tag`` names
them otherwise.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _flic_authors import ToyClient, run_authors  # noqa: E402
from _harness import RunResult, record, recorded, reference_kind, write_results  # noqa: E402

from _common import quiet_trainer  # noqa: E402
from fedhet.datamodules import LinearMappingToy  # noqa: E402
from fedhet.modules import FLIC, HetLocal  # noqa: E402
from fedhet.plugins import UniformSampler  # noqa: E402

NAME = "parity_flic"
KINDS = {"main_flic.py": "FLIC authors"}
METHODS = ("Local", "FLIC-Class", "FLIC-HL")
LOCAL_WEIGHT_DECAY = 1e-4  # their competitors' Adam weight decay


@dataclass(frozen=True)
class FlicSetting:
    """The task and the recipe, identical on both sides (see the module docstring).

    Attributes:
        clients: number of clients ``b``.
        samples_per_class: training pool per class (the paper's 2000).
        test_samples_per_class: test pool per class (the paper's 1000).
        fraction: share of the clients sampled per round.
        rounds: sampled rounds, followed by one round with every client.
        local_epochs: local epochs per round (FLIC-HL: the last one on the shared layer).
        align_epochs: pre-training epochs of every embedding.
        align_batch_size: pre-training batch size.
        align_lr: pre-training Adam learning rate.
        lr: Adam learning rate of local training and of the anchors' step.

    """

    clients: int = 20
    samples_per_class: int = 2000
    test_samples_per_class: int = 1000
    fraction: float = 0.2
    rounds: int = 10
    local_epochs: int = 5
    align_epochs: int = 20
    align_batch_size: int = 10
    align_lr: float = 1e-3
    lr: float = 1e-3


def toy(setting: FlicSetting, seed: int) -> LinearMappingToy:
    """The linear-mapping toy (fedhet's) of ``setting`` for ``seed`` (batch 100, no validation split)."""
    return LinearMappingToy(
        num_clients=setting.clients,
        samples_per_class=setting.samples_per_class,
        test_samples_per_class=setting.test_samples_per_class,
        batch_size=100,
        seed=seed,
    )


def toy_clients(data: LinearMappingToy) -> list[ToyClient]:
    """Every client's train and test tensors, in fedhet's client order (their scripts number the clients so)."""
    data.setup("fit")
    out = []
    for cid in data.client_ids:
        train, test = data.client(cid).train_dataset, data.client(cid).test_dataset
        out.append(ToyClient(cid, train.x.clone(), train.y.clone(), test.x.clone(), test.y.clone()))
    return out


def fedhet_model(method: str, setting: FlicSetting) -> FLIC:
    """The fedhet module for ``method`` with the reference code's recipe."""
    if method == "Local":
        return HetLocal(network="mlp", lr=setting.lr, weight_decay=LOCAL_WEIGHT_DECAY)
    return FLIC(
        variant="class" if method == "FLIC-Class" else "hl",
        network="mlp",
        anchor_variance=math.e,
        anchor_stats="sampled",
        pretrain_epochs=setting.align_epochs,
        pretrain_batch_size=setting.align_batch_size,
        pretrain_lr=setting.align_lr,
        final_local_epochs=max(10, setting.local_epochs - 1),
        lr=setting.lr,
        weight_decay=setting.lr,  # their classifier's Adam: weight_decay = lr on weight matrices
    )


def run_fedhet(method: str, setting: FlicSetting, seed: int, root: Path) -> RunResult:
    """One fedhet run: final mean client test accuracy and CPU seconds per round (pre-training included)."""
    torch.manual_seed(seed)
    local_epochs = setting.local_epochs - 1 if method == "FLIC-HL" else setting.local_epochs
    trainer = quiet_trainer(
        setting.rounds + 1,
        seed,
        root / f"fedhet_{method}_{seed}",
        local_epochs=local_epochs,
        sampler=UniformSampler(fraction=setting.fraction, full_last_round=True),
    )
    data, model = toy(setting, seed), fedhet_model(method, setting)
    start = time.process_time()
    trainer.fit(model, data)
    cpu = (time.process_time() - start) / (setting.rounds + 1)
    metrics = trainer.test(model, data)
    weighted = f"sample-weighted {100 * metrics['test/acc_weighted']:.2f}"
    return RunResult("fedhet", method, seed, 100 * metrics["test/acc_mean"], cpu, weighted)


def authors_argv(method: str, setting: FlicSetting, seed: int, realign: bool) -> list[str]:
    """Their command-line arguments for ``setting`` (besides dataset, clients, model and output folder)."""
    argv = ["--frac", str(setting.fraction), "--epochs", str(setting.rounds), "--local_ep", str(setting.local_epochs)]
    argv += ["--lr", str(setting.lr), "--local_bs", "100", "--seed", str(seed), "--num_classes", "20"]
    if method == "Local":
        return argv
    argv += ["--align_epochs", str(setting.align_epochs), "--align_bs", str(setting.align_batch_size)]
    argv += ["--align_lr", str(setting.align_lr), "--align_epochs_altern", "1" if realign else "0"]
    return argv + ["--local_rep_ep", "1", "--start_optimize_rep", "-1", "--test_freq", "1"]


SIDES = {"authors": (False, False), "authors (re-align)": (True, False), "authors (fresh heads)": (False, True)}
"""Their runs: side -> (their default re-alignment, the fresh-heads diagnosis of ``_flic_authors.py``)."""


def run_reference(checkout: Path, method: str, setting: FlicSetting, seed: int, side: str) -> RunResult:
    """One run of their script on fedhet's tensors of ``seed``, as ``side`` says (:data:`SIDES`)."""
    realign, fresh_heads = SIDES[side]
    clients = toy_clients(toy(setting, seed))
    run = run_authors(checkout, method, clients, authors_argv(method, setting, seed, realign), fresh_heads)
    note = f"sample-weighted {run.weighted:.2f} (their printed figure)"
    return RunResult(side, method, seed, run.accuracy, run.train_cpu / (setting.rounds + 1), note)


NOTES = [
    "Both sides train on fedhet's exact client tensors (the linear-mapping toy, same partition and train/test split"
    " per seed) with the same networks, rounds, epochs, optimisers, learning rates and anchor recipe (module"
    " docstring of `benchmarks/parity/flic.py`). Accuracy: unweighted mean over the clients of each client's test"
    " accuracy after the last round (every client takes part in it); the sample-weighted figure (what their script"
    " prints) is in the note. CPU s / round: `time.process_time` of the whole run (pre-training and the last,"
    " all-client round included; their per-round evaluations of every client's train and test sets left out) over"
    " rounds + 1, one torch thread, on a 2-core machine shared with other jobs.",
    "",
    "Known differences (from reading their code; the table measures their joint effect):",
    "",
    "- Their server divides every parameter of its global model by the number of participants, the head included,"
    " and the per-client records of clients never sampled alias that model's tensors: a client's first participation"
    " starts from the previous round's first participant's head divided by the number of participants. fedhet starts"
    " every client from the one shared initial head.",
    "- They pre-train every embedding before round 0; fedhet at a client's first participation, against the anchors"
    " of that round (which have moved by well under 1% of their spread by then).",
    "- Their per-batch anchor step embeds the batch again after the model's step; fedhet uses the embeddings of the"
    " step. Their sampled W2 adds 1e-6 to every entry of the b x b matrix whose eigenvalues give the trace term;"
    " fedhet takes the closed form on the two sample covariances.",
    "- Their Local network is `k_i -> 64 -> 64 -> C` (ReLU) with weight decay on every weight matrix; fedhet's"
    " `HetLocal` is FLIC's embedding `k_i -> 64 -> 64 -> 64` and a linear head, weight decay on the head only.",
    "- Their protocol gives FLIC max(10, E - 1) epochs in the last round and Local E: at E = 5 (here) FLIC trains"
    " twice as long in the last round; at the paper's E = 10 (real data) or 100 (toys) the budgets are equal. Both"
    " sides follow it.",
]


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference-dir", type=Path, action="append", default=[], help="a checkout of arakotom/flic")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--sides", nargs="+", choices=["fedhet", *SIDES], default=None)
    for field, value in FlicSetting.__dataclass_fields__.items():
        p.add_argument(f"--{field.replace('_', '-')}", type=type(value.default), default=value.default)
    p.add_argument("--root", type=Path, default=Path("fedhet_runs/parity"), help="fedhet's run folders")
    p.add_argument("--tag", default=NAME, help="name of the results files and of the runs' record under --root")
    p.add_argument("--table-only", action="store_true", help="write the table from the runs recorded under --root")
    return p


def main() -> None:
    """Run the sides for every seed and method, then write the table."""
    args = parser().parse_args()
    torch.set_num_threads(1)
    setting = FlicSetting(**{field: getattr(args, field) for field in FlicSetting.__dataclass_fields__})
    references = {reference_kind(path, KINDS): path for path in args.reference_dir}
    sides = set(args.sides or ["fedhet", "authors"])
    for seed in [] if args.table_only else args.seeds:
        for method in args.methods:
            if "fedhet" in sides:
                record(run_fedhet(method, setting, seed, args.root), args.root, args.tag)
            for side in SIDES:
                if side in sides and "FLIC authors" in references and (method != "Local" or side == "authors"):
                    result = run_reference(references["FLIC authors"], method, setting, seed, side)
                    record(result, args.root, args.tag)
    title = "FLIC parity (linear-mapping toy)"
    print(write_results(args.tag, title, setting, recorded(args.root, args.tag), NOTES, references))


if __name__ == "__main__":
    main()
