"""A check any method's tests can run: what leaves a client in a federated round, and the bytes accounted for it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

import torch

from fedhet.callbacks import FederatedCallback
from fedhet.core import ClientUpdate, tensors_mismatch
from fedhet.datamodules import FederatedDataModule
from fedhet.plugins import Checkpointing, FederatedTrainer, Processes, Reporting
from tests.trainer_options import trainer_options


@dataclass(frozen=True)
class UploadCase:
    """One method's privacy contract, as a row of the parametrised uploads test.

    Args:
        module: builds the method's module (tiny settings).
        federation: builds the clients it runs on.
        statistics: the statistic names each client declares it uploads (besides its shared parameters), or a
            function of the module built for a client giving them (when they depend on the client's layers).
        never: ``fnmatch`` patterns of state names that must never leave a client (personal layers, embeddings,
            batch-norm statistics...), written from the method's definition, not from its code.
        trainer_kwargs: extra ``FederatedTrainer`` settings (e.g. ``privacy``).

    """

    module: Callable[[], torch.nn.Module]
    federation: Callable[[], FederatedDataModule]
    statistics: frozenset[str] | Callable[[torch.nn.Module], set[str]] = frozenset()
    never: tuple[str, ...] = ()
    trainer_kwargs: dict = field(default_factory=dict)


class UploadSpy(FederatedCallback):
    """Every round's uploads as the server receives them."""

    def __init__(self) -> None:
        self.uploads: dict[int, list[ClientUpdate]] = {}

    def on_aggregate_start(self, round_idx: int, updates: list[ClientUpdate]) -> None:
        self.uploads[round_idx] = list(updates)


def built_for(template: torch.nn.Module, spec) -> torch.nn.Module:
    """A fresh copy of ``template`` with the layers of the client described by ``spec``."""
    module = copy.deepcopy(template)
    module.setup_client(spec)
    module.configure_model()
    return module


def _holds_a_row_of(tensor: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether any row of ``tensor`` (last dimension = a sample's features) equals a training sample."""
    if not tensor.is_floating_point() or tensor.ndim == 0 or tensor.shape[-1] != x.shape[1]:
        return False
    rows = tensor.reshape(-1, x.shape[1]).to(x.dtype)
    return bool((torch.cdist(rows, x) == 0).any())


def check_uploads(case: UploadCase, root: str, rounds: int = 2) -> list[ClientUpdate]:
    """Run ``rounds`` rounds of ``case`` and check every upload; returns the uploads of the last round.

    Checks, for every client of every round: its shared parameters are exactly the names its module declares shared
    and none matches ``case.never``; its statistics are exactly ``case.statistics``, which are the names of the
    module's ``upload_declaration``, with the shapes and dtypes it declares; no uploaded tensor holds a raw
    training sample; and ``comm/bytes_up`` of the round equals the bytes of the round's uploads.
    """
    spy = UploadSpy()
    template, federation = case.module(), case.federation()
    trainer = FederatedTrainer(
        **trainer_options(
            rounds=rounds,
            processes=Processes(accelerator="cpu"),
            checkpointing=Checkpointing(every=0),
            reporting=Reporting(progress_bar=False),
            logger=False,
            default_root_dir=root,
            callbacks=[spy],
            **case.trainer_kwargs,
        )
    )
    trainer.fit(template, federation)
    specs = federation.specs
    assert sorted(spy.uploads) == list(range(rounds))
    for round_idx, uploads in spy.uploads.items():
        assert uploads, f"round {round_idx}: no uploads"
        for upload in uploads:
            where = f"round {round_idx}, client '{upload.client_id}'"
            module = built_for(template, specs[upload.client_id])
            assert set(upload.shared) == {name for name in module.state_dict() if module.is_shared(name)}, where
            leaked = [n for n in upload.shared if any(fnmatchcase(n, p) for p in case.never)]
            assert not leaked, f"{where}: personal state {leaked} left the client"
            statistics = case.statistics(module) if callable(case.statistics) else case.statistics
            assert set(upload.statistics) == statistics, where
            declared = module.upload_declaration(specs[upload.client_id]).statistics
            assert set(declared) == statistics, f"{where}: the module's upload declaration"
            assert tensors_mismatch("statistic", upload.statistics, declared) is None, where
            x = federation.client(upload.client_id).train_dataset.x.flatten(1)
            for name, tensor in _tensors(upload):
                assert not _holds_a_row_of(tensor, x), f"{where}: '{name}' holds a raw training sample"
        sent = sum(t.numel() * t.element_size() for u in uploads for _, t in _tensors(u))
        assert trainer.history[round_idx]["comm/bytes_up"] == sent, f"round {round_idx}: bytes accounted"
    return spy.uploads[rounds - 1]


def _tensors(upload: ClientUpdate) -> Iterable[tuple[str, torch.Tensor]]:
    yield from upload.shared.items()
    yield from upload.statistics.items()
