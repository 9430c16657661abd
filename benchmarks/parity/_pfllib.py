"""Drive PFLlib (Zhang et al., https://github.com/TsingZ0/PFLlib) from outside on fedhet's client tensors.

Nothing of PFLlib is copied: its ``system/`` folder is put on ``sys.path`` and its own server and client classes run
its own round loop (``Server.train``). The adapter

* exports every client's tensors in PFLlib's own data format (``dataset/<name>/{train,test}/<client>.npz`` holding
  ``{"x", "y"}``, what its ``utils.data_utils.read_client_data`` reads) in a temporary folder;
* gives it the model (the same body and linear head as fedhet, as PFLlib's ``BaseHeadSplit``);
* gives every client, at the start of each of its local rounds, a fresh SGD with fedhet's momentum, weight decay
  and learning rates (PFLlib's clients keep one plain SGD for the whole run);
* replaces ``evaluate`` (to record every client's accuracy and stop after the last trained round) and
  ``save_results`` (no files).

``fix_head_order`` (FedPAC only) puts the statistics in the order of the uploaded heads before PFLlib's head mixing
(see :func:`_fixed_head_order`).
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _harness import ClientTensors, RunResult, Setting
from torch import nn

DATASET = "fedhet"


class _FinishedError(Exception):
    """Raised by the replaced ``evaluate`` once the last trained round was evaluated."""


@contextmanager
def _pfllib(checkout: Path, clients: Sequence[ClientTensors]) -> Any:
    """PFLlib importable, the clients exported in its format, and the working directory its paths expect."""
    system = str(checkout / "system")
    old_cwd, old_path = os.getcwd(), list(sys.path)
    with tempfile.TemporaryDirectory() as tmp:
        for part in ("train", "test"):
            folder = Path(tmp) / "dataset" / DATASET / part
            folder.mkdir(parents=True)
            for idx, c in enumerate(clients):
                x, y = (c.x_train, c.y_train) if part == "train" else (c.x_test, c.y_test)
                with (folder / f"{idx}.npz").open("wb") as f:
                    np.savez(f, data={"x": x.numpy(), "y": y.numpy()})
        (Path(tmp) / "system").mkdir()
        os.chdir(Path(tmp) / "system")  # PFLlib reads ../dataset/<name>/
        sys.path.insert(0, system)
        try:
            yield
        finally:
            os.chdir(old_cwd)
            sys.path[:] = old_path


def _args(setting: Setting, model: nn.Module, algorithm: str, clients: int) -> argparse.Namespace:
    """PFLlib's command-line arguments (its ``main.py`` defaults) for ``setting``."""
    return argparse.Namespace(
        algorithm=algorithm,
        auto_break=False,
        batch_num_per_client=2,
        batch_size=setting.batch_size,
        client_drop_rate=0.0,
        dataset=DATASET,
        device="cpu",
        dlg_eval=False,
        dlg_gap=100,
        eval_gap=setting.rounds,  # evaluate before the first round and after the last one only
        few_shot=0,
        fine_tuning_epoch_new=0,
        global_rounds=setting.rounds,
        goal="parity",
        join_ratio=1.0,
        lamda=1.0,
        learning_rate_decay=False,
        learning_rate_decay_gamma=0.99,
        local_epochs=setting.local_epochs,
        local_learning_rate=setting.lr,
        model=model,
        num_classes=10,
        num_clients=clients,
        num_new_clients=0,
        plocal_epochs=setting.head_epochs,
        random_join_ratio=False,
        save_folder_name="items",
        send_slow_rate=0.0,
        time_select=False,
        time_threthold=10000,
        top_cnt=100,
        train_slow_rate=0.0,
    )


def _sgd(params: Any, lr: float, setting: Setting) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=lr, momentum=setting.momentum, weight_decay=setting.weight_decay)


def _fresh_optimizers(client_cls: type, algorithm: str, setting: Setting) -> None:
    """Give ``client_cls`` a fresh SGD with fedhet's recipe at the start of every local round."""
    train = client_cls.train

    def train_with_fresh_optimizer(self: Any) -> None:
        base, head = list(self.model.base.parameters()), list(self.model.head.parameters())
        if algorithm == "FedPAC":  # one optimizer, body and head groups (the phases freeze one of them)
            groups = [{"params": base, "lr": setting.lr}, {"params": head, "lr": setting.head_lr}]
            self.optimizer = _sgd(groups, setting.lr, setting)
        else:  # FedRep: PFLlib's own two optimizers, body and head
            self.optimizer = _sgd(base, setting.lr, setting)
            self.optimizer_per = _sgd(head, setting.lr, setting)
        train(self)

    client_cls.train = train_with_fresh_optimizer


def _fixed_head_order(server: Any) -> None:
    """Put PFLlib's FedPAC statistics in the order of its uploaded heads before the heads are mixed.

    ``serverpac.FedPAC.train`` collects ``Vars``/``Hs`` in the order of ``selected_clients`` (a random permutation
    from ``np.random.choice``), while ``receive_models`` lists ``uploaded_ids``/``uploaded_heads`` in a second random
    order (``random.sample``); ``aggregate_and_send_heads`` then solves client ``k``'s QP with the ``k``-th statistics
    and gives the result, built from heads in the other order, to the ``k``-th uploaded client. Reordering the
    statistics makes the ``k``-th QP belong to the ``k``-th uploaded client.
    """
    mix = server.aggregate_and_send_heads

    def aggregate_and_send_heads() -> None:
        position = {client.id: k for k, client in enumerate(server.selected_clients)}
        server.Vars = [server.Vars[position[cid]] for cid in server.uploaded_ids]
        server.Hs = [server.Hs[position[cid]] for cid in server.uploaded_ids]
        mix()

    server.aggregate_and_send_heads = aggregate_and_send_heads


def run_pfllib(
    checkout: Path,
    algorithm: str,
    clients: Sequence[ClientTensors],
    setting: Setting,
    seed: int,
    body: nn.Module,
    head: nn.Module,
    fix_head_order: bool = False,
) -> RunResult:
    """One PFLlib run of ``algorithm`` (``"FedPAC"`` or ``"FedRep"``) on ``clients``; accuracy after the last round.

    PFLlib's ``train`` evaluates at the start of a round, after ``send_models`` (the new body; FedPAC's mixed heads
    were set at the end of the previous round), so its evaluation after ``setting.rounds`` trained rounds is the
    personalised model fedhet tests. CPU seconds per round: from the end of the first evaluation to the start of the
    last one, divided by the rounds.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    with _pfllib(checkout, clients):
        from flcore.trainmodel.models import BaseHeadSplit

        if algorithm == "FedPAC":
            from flcore.clients.clientpac import clientPAC
            from flcore.servers.serverpac import FedPAC

            client_cls, server_cls = clientPAC, FedPAC
        elif algorithm == "FedRep":
            from flcore.clients.clientrep import clientRep
            from flcore.servers.serverrep import FedRep

            client_cls, server_cls = clientRep, FedRep
        else:
            raise ValueError(f"run_pfllib: field 'algorithm' must be 'FedPAC' or 'FedRep', got {algorithm!r}")
        original_train = client_cls.train
        _fresh_optimizers(client_cls, algorithm, setting)
        try:
            model = BaseHeadSplit(copy.deepcopy(body), copy.deepcopy(head))
            server = server_cls(_args(setting, model, algorithm, len(clients)), times=0)
            if fix_head_order:
                _fixed_head_order(server)
            marks: list[float] = []
            accuracies: list[float] = []

            def evaluate(*_: Any, **__: Any) -> None:
                marks.append(time.process_time())
                if len(marks) > 1:
                    _, num, correct, _ = server.test_metrics()
                    accuracies.extend(100.0 * c / n for c, n in zip(correct, num, strict=True))
                    raise _FinishedError
                marks[-1] = time.process_time()

            server.evaluate = evaluate
            server.save_results = lambda: None
            with suppress(_FinishedError):
                server.train()
        finally:
            client_cls.train = original_train
    name = algorithm + (" (head order fixed)" if fix_head_order else "")
    return RunResult("PFLlib", name, seed, statistics.fmean(accuracies), (marks[1] - marks[0]) / setting.rounds)
