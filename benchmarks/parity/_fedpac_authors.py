"""Drive the FedPAC authors' code (Xu, Tong & Huang, https://github.com/JianXu95/FedPAC) on fedhet's client tensors.

Nothing of their code is copied: the checkout is put on ``sys.path`` and their own client class
(``methods.LocalUpdate_FedPAC``) and round function (``running.train_round_fedpac``) run as their
``federated_main.py`` runs them, with their model ``models.CNN_FMNIST`` for ``network="cnn"`` and, for the MLP, the
parity scripts' body and head behind their model interface (:class:`TwoOutputNet`). The adapter

* hands each client its train and test tensors in the format their ``data_loader.get_dataset`` returns (one
  ``DataLoader`` per client, batch 50, shuffled for training);
* restores ``torch.eig`` for their head-mixing QP (``tools.get_head_agg_weight``), removed from PyTorch 2: the
  replacement returns the eigenvalues as ``(n, 2)`` real/imaginary columns and real eigenvectors, as the old call
  did for the symmetric matrix it is given.

Their optimiser is hard-coded (SGD, momentum 0.5, weight decay 5e-4, head lr 0.1, body lr ``args.lr``), and is the
recipe the parity scripts give fedhet. Their script prints, each round, the mean client accuracy after local
training and before aggregation; the parity table reports instead every client's model after the last round (new
body, mixed head), as fedhet and PFLlib are tested, and gives their printed figure in the note.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import random
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _harness import ClientTensors, RunResult, Setting, body_and_head
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


class TwoOutputNet(nn.Module):
    """A body and a linear head with the interface of the authors' models.

    ``forward`` returns ``(features, logits)`` and ``classifier_weight_keys`` names the head's parameters, as their
    ``CNN_FMNIST`` does.
    """

    classifier_weight_keys = ["head.weight", "head.bias"]

    def __init__(self, body: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.head = head

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Features ``(B, 128)`` and logits ``(B, 10)``."""
        z = self.body(x)
        return z, self.head(z)


def _eig(matrix: torch.Tensor, eigenvectors: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.eig`` as PyTorch 1 had it: eigenvalues ``(n, 2)`` (real, imaginary) and real eigenvectors."""
    values, vectors = torch.linalg.eig(matrix)
    return torch.stack([values.real, values.imag], dim=1), vectors.real


@contextmanager
def _authors_code(checkout: Path) -> Any:
    """Their modules importable and ``torch.eig`` back for the duration."""
    old_path, old_eig = list(sys.path), getattr(torch, "eig", None)
    sys.path.insert(0, str(checkout))
    torch.eig = _eig  # PyTorch 2 keeps a stub that raises
    try:
        yield
    finally:
        sys.path[:] = old_path
        if old_eig is None:
            del torch.eig
        else:
            torch.eig = old_eig


def run_authors_fedpac(
    checkout: Path, clients: Sequence[ClientTensors], setting: Setting, seed: int, quiet: bool = True
) -> RunResult:
    """One run of their FedPAC on ``clients``: accuracy of every client's model after the last round.

    CPU seconds per round: their ``train_round_fedpac`` (which also tests every client three times a round).
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    with _authors_code(checkout):
        from methods import local_update
        from models import CNN_FMNIST
        from running import one_round_training

        args = argparse.Namespace(
            num_users=len(clients),
            frac=1.0,
            epochs=setting.rounds,
            local_epoch=setting.local_epochs,
            lr=setting.lr,
            lam=1.0,
            num_classes=10,
            device=torch.device("cpu"),
            agg_g=1,
            momentum=setting.momentum,
            train_rule="FedPAC",
        )
        global_model = CNN_FMNIST(num_classes=10) if setting.network == "cnn" else TwoOutputNet(*body_and_head(setting))
        local_cls, round_fn = local_update(args.train_rule), one_round_training(args.train_rule)
        local_clients = []
        for idx, c in enumerate(clients):
            train = DataLoader(TensorDataset(c.x_train, c.y_train), batch_size=setting.batch_size, shuffle=True)
            test = DataLoader(TensorDataset(c.x_test, c.y_test), batch_size=setting.batch_size, shuffle=False)
            model = copy.deepcopy(global_model)  # as their federated_main.py
            local_clients.append(local_cls(idx=idx, args=args, train_set=train, test_set=test, model=model))
        seconds, printed = [], 0.0
        for rnd in range(setting.rounds):
            start = time.process_time()
            with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
                _, _, _, printed = round_fn(args, global_model, local_clients, rnd)
            seconds.append(time.process_time() - start)
        accuracies = [client.local_test(client.test_data)[0] for client in local_clients]
    return RunResult(
        "FedPAC authors",
        "FedPAC",
        seed,
        statistics.fmean(accuracies),
        statistics.fmean(seconds),
        note=f"their printed accuracy (after local training, before mixing): {printed:.2f}",
    )
