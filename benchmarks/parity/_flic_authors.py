"""Drive the FLIC authors' code (Rakotomamonjy et al., https://github.com/arakotom/flic) on fedhet's client tensors.

Nothing of their code is copied: the checkout is put on ``sys.path`` and their own scripts run as they are —
``main_flic.py`` for FLIC (``--model_type classif``: FLIC-Class, ``no-hlayers``: FLIC-HL) and
``main_het_competitor.py --alg local`` for Local — with ``runpy``, on their toy branch ``--dataset toy_3`` (the
linear-mapping toy). The adapter

* replaces their data module ``Het_data`` (which also imports torchvision for datasets not used here) by one whose
  ``get_toy_3`` returns fedhet's client tensors in the format theirs returns: ``{client: TensorDataset(x, y)}`` for
  train and test and ``{client: input dimension}``, with ``args.dim`` / ``args.num_classes`` set as theirs sets them;
* times their evaluation function (``het_test_img_local_all`` / ``het_competitor_test_img_local_all``, called on the
  train and the test sets of every client after every round) so that its CPU time is left out of the CPU per round;
* after their script returns, tests every client's final model with their own evaluation function
  (``return_all=True``) to report the unweighted mean over clients beside the sample-weighted accuracy they print.

Their scripts seed ``random``, ``numpy`` and ``torch`` from ``--seed`` and run on CPU as published (nothing else is
patched), except with ``fresh_heads=True``, a diagnosis: ``torch.nn.Module.state_dict`` then returns copies during
their run, so the per-client records of clients never sampled no longer alias their global model's tensors and such a
client starts from the shared initial head (as in fedhet) instead of the previous round's first participant's head
divided by the number of participants. Their outputs (a CSV of accuracies per round) go to a temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset


@dataclass
class ToyClient:
    """One client's exact tensors, as fedhet builds them.

    Attributes:
        client_id: fedhet's client id.
        x_train: training features ``(N_train, d_i)``.
        y_train: training labels ``(N_train,)``.
        x_test: test features ``(N_test, d_i)``.
        y_test: test labels ``(N_test,)``.

    """

    client_id: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass(frozen=True)
class AuthorsRun:
    """What one run of their script gave.

    Attributes:
        accuracy: unweighted mean of the clients' final test accuracies (%).
        weighted: the sample-weighted final test accuracy their script prints (%).
        train_cpu: CPU seconds of the run without their per-round evaluations.

    """

    accuracy: float
    weighted: float
    train_cpu: float


def _data_module(clients: Sequence[ToyClient], num_classes: int, base_dim: int) -> types.ModuleType:
    """A stand-in for their ``Het_data`` whose ``get_toy_3`` returns fedhet's tensors."""

    def get_toy_3(args: Any) -> tuple[dict, dict, dict, dict]:
        args.dim = base_dim
        args.num_classes = num_classes
        args.subsample_client_data = False
        args.dim_pertub_max = max(c.x_train.shape[1] for c in clients)  # their FedHeNN's probe width; unused here
        train = {i: TensorDataset(c.x_train.float(), c.y_train.long()) for i, c in enumerate(clients)}
        test = {i: TensorDataset(c.x_test.float(), c.y_test.long()) for i, c in enumerate(clients)}
        dims = {i: int(c.x_train.shape[1]) for i, c in enumerate(clients)}
        return train, dims, test, dict(dims)

    module = types.ModuleType("Het_data")
    module.get_toy_3 = get_toy_3  # type: ignore[attr-defined]
    return module


class _Timed:
    """Wraps a function and adds the CPU seconds spent in it to :attr:`seconds`."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.seconds = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.seconds += time.process_time() - start


def _copying_state_dict(state_dict: Callable[..., Any]) -> Callable[..., Any]:
    """``Module.state_dict`` returning copies of the tensors instead of views of the parameters."""

    def copying(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return {name: value.clone() for name, value in state_dict(self, *args, **kwargs).items()}

    return copying


def run_authors(
    checkout: Path, method: str, clients: Sequence[ToyClient], argv: Sequence[str], fresh_heads: bool = False
) -> AuthorsRun:
    """Run their FLIC (``FLIC-Class``, ``FLIC-HL``) or Local script on ``clients`` with the extra arguments ``argv``.

    Args:
        checkout: their repository.
        method: ``FLIC-Class``, ``FLIC-HL`` or ``Local``.
        clients: fedhet's clients, numbered in this order on their side.
        argv: their command-line arguments besides ``--dataset``, ``--num_users``, ``--model_type``/``--alg`` and
            ``--savedir`` (rounds, epochs, learning rates, seed...).
        fresh_heads: the diagnosis of the module docstring.

    Returns:
        the final accuracies and the training CPU time.

    """
    num_classes = int(max(int(c.y_train.max()) for c in clients)) + 1
    base_dim = 5
    script = "main_het_competitor.py" if method == "Local" else "main_flic.py"
    model = "classif" if method == "FLIC-Class" else "no-hlayers"
    kind = ["--alg", "local"] if method == "Local" else ["--model_type", model]
    saved_path, saved_argv, state_dict = list(sys.path), list(sys.argv), torch.nn.Module.state_dict
    saved_modules = {name: sys.modules.get(name) for name in ("Het_data", "Het_Update", "Het_Nets", "Het_Prior")}
    try:
        sys.path.insert(0, str(checkout))
        sys.modules["Het_data"] = _data_module(clients, num_classes, base_dim)
        for name in ("Het_Update", "Het_Nets", "Het_Prior"):
            sys.modules.pop(name, None)
        import Het_Update  # their module, imported from the checkout

        evaluation = "het_competitor_test_img_local_all" if method == "Local" else "het_test_img_local_all"
        timed = _Timed(getattr(Het_Update, evaluation))
        setattr(Het_Update, evaluation, timed)
        with tempfile.TemporaryDirectory() as tmp:
            sys.argv = [script, "--dataset", "toy_3", "--num_users", str(len(clients)), *kind, *argv]
            sys.argv += ["--savedir", tmp + "/"]
            start = time.process_time()
            if fresh_heads:
                torch.nn.Module.state_dict = _copying_state_dict(state_dict)  # type: ignore[method-assign]
            with contextlib.redirect_stdout(io.StringIO()):
                final = runpy.run_path(str(checkout / script), run_name="__main__")
            torch.nn.Module.state_dict = state_dict  # type: ignore[method-assign]
            train_cpu = time.process_time() - start - timed.seconds
            args = final["args"]
            if method == "Local":
                per_client, _ = timed.function(final["nets_local"], args, final["user_test_data"], return_all=True)
            else:
                per_client, _ = timed.function(
                    final["net_glob"],
                    final["net_preprocs"],
                    args,
                    final["user_test_data"],
                    w_glob_keys=final["w_glob_keys"],
                    w_locals=final["w_locals"],
                    return_all=True,
                )
        sizes = np.array([len(c.y_test) for c in clients], dtype=float)
        accuracy = float(np.mean(per_client / sizes))  # their return_all gives accuracy (%) times test size
        return AuthorsRun(accuracy, float(final["accs"][-1]), train_cpu)
    finally:
        sys.path[:], sys.argv[:] = saved_path, saved_argv
        torch.nn.Module.state_dict = state_dict  # type: ignore[method-assign]
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
