"""FedRep parity: fedhet against PFLlib's FedRep, on the same client tensors.

Collins et al., "Exploiting Shared Representations for Personalized Federated Learning", ICML 2021. Same task and
recipe as ``fedpac.py`` (see :class:`_harness.Setting`): 20 Fashion-MNIST clients of FedPAC's dominant-class
partition built by fedhet, an MLP body 784 -> 128 (``--network cnn``: the FedPAC paper's CNN) shared and a linear
personal head; each round ``head_epochs`` = 1 epoch on the head, then ``--local-epochs`` epochs on the body, both
at ``--lr``, SGD momentum 0.5, weight decay 5e-4, batch 50, full participation.

Reference (never copied here; pass the checkout with ``--reference-dir``): PFLlib,
``git clone https://github.com/TsingZ0/PFLlib`` (used: commit d832e76f6a23, 2025-11-29). Needs ``h5py`` in the
environment that runs this script (``pip install h5py``; not a fedhet dependency).

Run from the repository root, e.g.::

    nice -n 19 python benchmarks/parity/fedrep.py --reference-dir ../PFLlib --seeds 0 1

Writes ``benchmarks/results/parity_fedrep.{md,csv}`` and ``parity_fedrep_runs.csv`` (one row per run).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

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

from fedhet.modules import FedRep  # noqa: E402

NAME = "parity_fedrep"
KINDS = {"system/flcore/servers/serverrep.py": "PFLlib"}
NOTES = [
    "Both implementations train on fedhet's exact client tensors (same partition, same train/test split per seed)"
    " with the same body and head, rounds, epochs, optimiser and learning rate. Accuracy: unweighted mean over the 20"
    " clients of the test accuracy of each client's model after the last round (the server's body and the client's"
    " own head). CPU s / round: `time.process_time` per round, one torch thread, on a 2-core machine shared with"
    " other jobs.",
    "",
    "Known differences (from reading the code; the table measures their effect):",
    "",
    "- PFLlib's clients keep two plain SGDs (body, head; no momentum, no weight decay) for the whole run; the adapter"
    " gives them fresh ones with this recipe every round, as fedhet's one optimiser per round (frozen parts skipped).",
    "- PFLlib reseeds torch with 0 while building every client (`Client.__init__`), so its shuffling does not follow"
    " the run's seed (its initial weights do: the adapter draws them before).",
    "- `fedhet (personal_init=per_client)`: each client's head drawn from its own seed instead of one shared"
    " initialisation (fedhet's default, as PFLlib's deep copies of one model).",
]


def main() -> None:
    """Run both sides for every seed and write the table."""
    args = base_parser(__doc__).parse_args()
    torch.set_num_threads(1)
    setting = Setting(network=args.network, rounds=args.rounds, local_epochs=args.local_epochs, lr=args.lr)
    references = {reference_kind(path, KINDS): path for path in args.reference_dir}

    def build() -> FedRep:
        return FedRep(
            head_epochs=setting.head_epochs,
            lr=setting.lr,
            momentum=setting.momentum,
            weight_decay=setting.weight_decay,
            hidden_dims=[128],
            network=setting.network,
        )

    sides = set(args.sides or ["fedhet", "fedhet-per-client", "PFLlib"])
    for seed in [] if args.table_only else args.seeds:
        clients = client_tensors(federation(setting, seed))
        if "fedhet" in sides:
            record(run_fedhet("FedRep", build, setting, seed, args.root), args.root, NAME)
        if "fedhet-per-client" in sides:
            record(run_fedhet("FedRep", build, setting, seed, args.root, "per_client"), args.root, NAME)
        if "PFLlib" in references and "PFLlib" in sides:
            torch.manual_seed(seed)
            body, head = body_and_head(setting)
            record(run_pfllib(references["PFLlib"], "FedRep", clients, setting, seed, body, head), args.root, NAME)
    print(write_results(NAME, "FedRep parity", setting, recorded(args.root, NAME), NOTES, references))


if __name__ == "__main__":
    main()
