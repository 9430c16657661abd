"""FedPAC parity: fedhet against PFLlib's FedPAC and the authors' code, on the same client tensors.

Xu, Tong & Huang, "Personalized Federated Learning with Feature Alignment and Classifier Collaboration", ICLR 2023.
The task is the paper's Fashion-MNIST one at a reduced budget (see :class:`_harness.Setting`): 20 clients, the
paper's dominant-class partition built by fedhet (600 train / 600 test images per client), an MLP body 784 -> 128
(``--network cnn``: the paper's CNN), 1 head epoch at lr 0.1 then ``--local-epochs`` body epochs at ``--lr``, SGD
momentum 0.5, weight decay 5e-4, batch 50, lambda = 1, full participation, ``--rounds`` rounds. Every side gets
fedhet's exact client tensors.

References (never copied here; pass each checkout with ``--reference-dir``, the script recognises which is which):

* PFLlib: ``git clone https://github.com/TsingZ0/PFLlib`` (used: commit d832e76f6a23, 2025-11-29); run as is, and
  a second time with its head-mixing order fixed (``_pfllib._fixed_head_order``). Needs ``h5py`` and ``cvxpy`` in
  the environment that runs this script (``pip install h5py cvxpy``; not fedhet dependencies).
* the authors' code: ``git clone https://github.com/JianXu95/FedPAC`` (used: commit 5770f4ff8f11, 2023-11-30).
  Needs ``cvxpy`` and ``scipy``.

Run from the repository root, e.g.::

    nice -n 19 python benchmarks/parity/fedpac.py --reference-dir ../PFLlib --reference-dir ../FedPAC --seeds 0 1

Writes ``benchmarks/results/parity_fedpac.{md,csv}`` and ``parity_fedpac_runs.csv`` (one row per run).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _fedpac_authors import run_authors_fedpac  # noqa: E402
from _harness import (  # noqa: E402
    Setting,
    base_parser,
    body_and_head,
    client_tensors,
    federation,
    record,
    recorded,
    reference_kind,
    run_fedhet,
    write_results,
)
from _pfllib import run_pfllib  # noqa: E402

from fedhet.modules import FedPAC  # noqa: E402

NAME = "parity_fedpac"
KINDS = {"system/flcore/servers/serverpac.py": "PFLlib", "methods/fedpac.py": "FedPAC authors"}
NOTES = [
    "Every implementation trains on fedhet's exact client tensors (same partition, same train/test split per seed)"
    " with the same body and head, rounds, epochs, optimiser and learning rates; the seed also seeds each reference's"
    " own draws (initial weights, shuffling). Accuracy: unweighted mean over the 20 clients of the test accuracy of"
    " each client's model after the last round (the server's body and the client's mixed head). CPU s / round:"
    " `time.process_time` per round, one torch thread, on a 2-core machine shared with other jobs.",
    "",
    "Known differences (from reading the code; the table measures their effect):",
    "",
    "- PFLlib mixes heads in the wrong client order: `serverpac.FedPAC.train` collects the statistics (`Vars`, `Hs`) in"
    " the order of `selected_clients` (a random permutation), `receive_models` lists the uploaded heads and ids in a"
    " second random order (`random.sample`), and `aggregate_and_send_heads` gives the `k`-th uploaded client the QP"
    " solution of the `k`-th selected client applied to heads in the uploaded order. `PFLlib FedPAC (head order"
    " fixed)` reorders the statistics to the uploaded order at run time (`_pfllib._fixed_head_order`).",
    "- PFLlib averages the class centroids with equal client weights; the paper, the authors' code and fedhet weight"
    " them by the clients' class counts.",
    "- PFLlib keeps one plain SGD (no momentum, no weight decay, the body's lr for the head) for a client's whole run;"
    " the adapter gives its clients a fresh SGD with this recipe every round (the authors' code builds one per phase"
    " per round, fedhet one per round with a body and a head group: the same steps).",
    "- The authors' round tests every client three times and loops over samples in Python for the statistics and the"
    " alignment targets; PFLlib computes every client's statistics in `send_models`: their CPU time per round is"
    " their code's, not only the method's.",
    "- The authors' script prints the mean accuracy after local training and before head mixing (the note column);"
    " the table tests every side at the same point, after the round.",
    "- fedhet solves each client's simplex QP by projected FISTA (`fedhet.functional.solve_simplex_qp`), the"
    " references with cvxpy after clipping small eigenvalues; the same threshold (1e-3) and renormalisation follow.",
    "- `fedhet (personal_init=per_client)`: each client's head drawn from its own seed instead of one shared"
    " initialisation (fedhet's default now, as the references do).",
]


def main() -> None:
    """Run every side for every seed and write the table."""
    args = base_parser(__doc__).parse_args()
    torch.set_num_threads(1)
    setting = Setting(network=args.network, rounds=args.rounds, local_epochs=args.local_epochs, lr=args.lr)
    references = {reference_kind(path, KINDS): path for path in args.reference_dir}

    def build() -> FedPAC:
        return FedPAC(
            lambda_align=1.0,
            network=setting.network,
            hidden_dims=[128],
            lr=setting.lr,
            head_lr=setting.head_lr,
            head_epochs=setting.head_epochs,
            momentum=setting.momentum,
            weight_decay=setting.weight_decay,
        )

    sides = set(args.sides or ["fedhet", "fedhet-per-client", "PFLlib", "PFLlib-fixed", "authors"])
    for seed in [] if args.table_only else args.seeds:
        clients = client_tensors(federation(setting, seed))
        if "fedhet" in sides:
            record(run_fedhet("FedPAC", build, setting, seed, args.root), args.root, NAME)
        if "fedhet-per-client" in sides:
            record(run_fedhet("FedPAC", build, setting, seed, args.root, "per_client"), args.root, NAME)
        for fix in (False, True):
            if "PFLlib" in references and ("PFLlib-fixed" if fix else "PFLlib") in sides:
                torch.manual_seed(seed)
                body, head = body_and_head(setting)
                result = run_pfllib(references["PFLlib"], "FedPAC", clients, setting, seed, body, head, fix)
                record(result, args.root, NAME)
        if "FedPAC authors" in references and "authors" in sides:
            record(run_authors_fedpac(references["FedPAC authors"], clients, setting, seed), args.root, NAME)
    text = write_results(NAME, "FedPAC parity", setting, recorded(args.root, NAME), NOTES, references)
    print(text)


if __name__ == "__main__":
    main()
