"""Adapter for the Global Layers authors' code (``transferFL/gl``): their trainer on fedhet's heart client tensors.

Sun et al., "Global Layers: Non-IID Tabular Federated Learning". The reference is imported from a checkout
(``--reference-dir``), never copied. Its own ``Trainer`` (``train.py``: BatchAlignedFedAvg, one AdamW per client,
global layers averaged once per epoch), its heart model (``heart/models/model.py``) and its torcheval metrics run
unchanged; this adapter only changes, at run time:

- the data: ``Trainer`` takes a ``dataset_loader``; ours hands over fedhet's train / validation / test tensors of each
  client (already encoded and standardised by fedhet, so the reference's CSV reading and scikit-learn encoders are
  bypassed) as loaders built the way its ``load_heart_disease`` builds them: training batch size
  ``floor(n_train / B)``, shuffled, ``drop_last`` as asked; evaluation loaders shuffled with the same batch size;
- the model sizes: its ``load_models`` does not pass ``num_heads`` and ``common_embed_dim`` on to ``Model``
  (a ``TypeError`` as committed); the adapter supplies the values its signature names (8 and 8);
- logging: TensorBoard's ``SummaryWriter`` and the multi-line progress bar are replaced by silent stand-ins (the
  metrics are the trainer's return values), and its prints are swallowed.

Needs ``torcheval`` (``pip install torcheval``; the reference's own dependency, not fedhet's) and pandas,
scikit-learn and tqdm (already installed with fedhet's test extras).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

HEART_SIZES = {"num_heads": 8, "common_embed_dim": 8}  # the defaults of the reference's ``load_models``
METRICS = ("auroc", "balanced_accuracy", "auprc")
BLOCK_NAMES = {"norm.": "norm_attn.", "mha.": "attn.", "ff.norm.": "norm_ff.", "ff.": ""}  # its block -> fedhet's


@dataclass
class HeartClient:
    """One client's exact tensors as fedhet splits and encodes them.

    Attributes:
        client_id: fedhet's client id (the site).
        parts: ``"train"``, ``"val"``, ``"test"`` -> (features ``(N, F)``, labels ``(N,)``, 1 = disease / event).

    """

    client_id: str
    parts: dict[str, tuple[torch.Tensor, torch.Tensor]]


class _Table(Dataset):
    """The few members of the reference's ``HeartDataset`` its trainer and model loader read."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.X, self.y = x.to(torch.get_default_dtype()), y.long()  # float32 unless a check asks for float64
        self.n_samples = len(self.X)

    def get_input_shape(self) -> tuple[int, ...]:
        return tuple(self.X.shape[-1:])

    def get_output_shape(self) -> tuple[int, ...]:
        return (2,)  # two label values at every heart site: one logit

    def __len__(self) -> int:
        return self.n_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.X[index], self.y[index]


def _loader_of(clients: Sequence[HeartClient]) -> Any:
    """A ``dataset_loader`` for the reference's ``Trainer`` serving ``clients``' tensors."""

    def load(batches: int, drop_last: bool, seed: int, device: str = "cpu", **_: Any) -> tuple[dict, dict, dict]:
        out: tuple[dict, dict, dict] = ({}, {}, {})
        for client in clients:
            batch = len(client.parts["train"][0]) // batches
            for split, part in zip(out, ("train", "test", "val"), strict=True):
                table = _Table(*client.parts[part])
                split[client.client_id] = DataLoader(
                    table, batch_size=batch, shuffle=True, drop_last=drop_last and part == "train"
                )
        return out

    return load


class _SilentWriter:
    """Stands in for TensorBoard's ``SummaryWriter``; ``log_dir`` is where the reference writes its test summary."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class _SilentBar(contextlib.AbstractContextManager):
    """Stands in for the reference's progress bar."""

    def __exit__(self, *exc: object) -> None:
        pass

    def set_description(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextlib.contextmanager
def _imported(checkout: Path) -> Iterator[tuple[types.ModuleType, types.ModuleType]]:
    """The reference's ``train`` and heart model modules, imported from ``checkout`` (TensorBoard stubbed if absent).

    The model loader is given the sizes it forgets to pass, once per process.
    """
    if importlib.util.find_spec("tensorboard") is None and "torch.utils.tensorboard" not in sys.modules:
        stub = types.ModuleType("torch.utils.tensorboard")
        stub.SummaryWriter = _SilentWriter  # type: ignore[attr-defined]
        sys.modules["torch.utils.tensorboard"] = stub
    sys.path.insert(0, str(checkout))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            train = importlib.import_module("train")
            model = importlib.import_module("heart.models.model")
        if not getattr(model.Model.__init__, "sized_by_fedhet", False):
            model.Model.__init__ = _sized(model.Model.__init__)
        yield train, model
    finally:
        sys.path.remove(str(checkout))


def _sized(init: Callable[..., None]) -> Callable[..., None]:
    """The reference model's ``__init__`` given the heart sizes its loader forgets to pass."""

    @functools.wraps(init)
    def sized(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**HEART_SIZES, **kwargs})

    sized.sized_by_fedhet = True  # type: ignore[attr-defined]
    return sized


def _check_averaged(models: Sequence[torch.nn.Module]) -> None:
    """Raise unless every model holds the same global layers (its nested-tensor averaging works on this torch)."""
    first = [p for layer in models[0].global_layers for p in layer.parameters()]
    for other in models[1:]:
        theirs = [p for layer in other.global_layers for p in layer.parameters()]
        if not all(torch.equal(a, b) for a, b in zip(first, theirs, strict=True)):
            raise RuntimeError("the reference's global layers differ between clients after its last averaging")


@contextlib.contextmanager
def reference_trainer(
    checkout: Path, clients: Sequence[HeartClient], seed: int, batches: int, federate: bool
) -> Iterator[Any]:
    """The reference's ``Trainer`` for ``clients`` (GL with ``federate=True``, else Local), not yet trained.

    Built as :func:`run_reference` builds it; its prints are swallowed while it is open.
    """
    with _imported(checkout) as (train, _), tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "run").mkdir()  # where its test() writes a summary
        train.get_tensorboard = lambda *args: _SilentWriter(f"{tmp}/run/tb/")
        train.multiline_tqdm = lambda *args, **kwargs: _SilentBar()
        with contextlib.redirect_stdout(io.StringIO()):
            yield train.Trainer(
                run_description=f"parity_{seed}",
                batches=batches,
                ee_dim=16,
                seed=seed,
                federate=federate,
                drop_last=True,
                device="cpu",
                log_metadata=False,
                force_consistent_feature_space=False,
                force_consistent_target_space=False,
                personalize=True,
                basepath=tmp,
                model_filename="model",
                dataset_loader=_loader_of(clients),
                learning_rate=1e-3,
                weight_decay=1e-4,
                name="heart",
            )


def run_reference(
    checkout: Path, clients: Sequence[HeartClient], seed: int, epochs: int, batches: int, federate: bool
) -> tuple[dict[str, dict[str, float]], float]:
    """Train the reference's GL (``federate=True``: layers 2-4 averaged once per epoch) or Local, then test.

    Returns:
        ``{client: {metric: value}}`` from the reference's own ``Trainer.test`` (torcheval), and CPU seconds per
        epoch (= round) of its training loop, validation pass included.

    """
    with reference_trainer(checkout, clients, seed, batches, federate) as trainer:
        start = time.process_time()
        trainer.train(epochs)
        cpu = (time.process_time() - start) / epochs
        scores = trainer.test()
    if federate:
        _check_averaged(list(trainer.models.values()))
    return {cid: {m: float(scores[cid][m]) for m in METRICS} for cid in scores}, cpu


def reference_model(checkout: Path, num_features: int, seed: int) -> torch.nn.Module:
    """The reference's heart GL model for a client with ``num_features`` columns and one logit, built with ``seed``."""
    with _imported(checkout) as (_, model), contextlib.redirect_stdout(io.StringIO()):
        return model.PartiallyPersonalizedModel(
            input_shape=(num_features,), output_shape=(2,), dropout=0.0, ee_dim=16, name="heart", seed=seed
        )


def fedhet_state(reference: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The reference model's parameters and buffers under fedhet's :class:`GlobalLayers` names and shapes.

    Its per-column ``Linear(1, E)`` weights ``(E, 1)`` and biases ``(E,)`` become the rows of fedhet's entity
    embedding ``(F, E)``; ``tf<i>`` becomes ``blocks.<i-1>`` (``norm`` -> ``norm_attn``, ``mha`` -> ``attn``,
    ``ff.w1/w2/norm`` -> ``w1/w2/norm_ff``); its dense layers' ``w`` is fedhet's ``linear``; ``fc_out`` is ``head``.
    """
    state: dict[str, torch.Tensor] = {}
    columns = reference.ee.w
    state["embedding.weight"] = torch.stack([linear.weight[:, 0] for linear in columns]).detach().clone()
    state["embedding.bias"] = torch.stack([linear.bias for linear in columns]).detach().clone()
    for name, value in reference.state_dict().items():
        top, _, rest = name.partition(".")
        if top == "ee":
            if rest.startswith("norm."):
                state[f"embedding.{rest}"] = value.clone()
            continue
        if top.startswith("tf"):
            block = f"blocks.{int(top[2:]) - 1}"
            prefix = next(p for p in BLOCK_NAMES if rest.startswith(p))
            state[f"{block}.{BLOCK_NAMES[prefix]}{rest[len(prefix) :]}"] = value.clone()
        elif top in ("layer1", "layer3", "layer5"):
            state[f"{top}.{rest.replace('w.', 'linear.', 1)}"] = value.clone()
        elif top == "fc_out":
            state[f"head.{rest}"] = value.clone()
        else:
            state[name] = value.clone()
    return state
