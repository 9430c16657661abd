"""One client's trained model as a Lightning checkpoint that its module class loads with ``load_from_checkpoint``.

A fedhet module builds its layers from the client's description (its ``client_spec``), so the checkpoint carries that
description beside Lightning's usual keys (``state_dict``, ``hyper_parameters``, ``pytorch-lightning_version``);
:meth:`fedhet.modules.FederatedModule.load_from_checkpoint` reads it back before the layers are built. Everything in
the checkpoint is tensors or plain Python, so it loads with ``weights_only=True``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lightning
import torch
from lightning.pytorch import LightningModule

#: the checkpoint key holding the client's description (``ClientSpec.to_dict()``)
CLIENT_SPEC_KEY = "fedhet_client_spec"


def lightning_checkpoint(module: LightningModule) -> dict[str, Any]:
    """The Lightning checkpoint of one client's module: its weights, hyperparameters and client description.

    Args:
        module: a built fedhet module (layers created for its ``client_spec``) holding the client's trained state.

    Returns:
        a dictionary with Lightning's keys (``state_dict`` on the CPU, ``hyper_parameters``, ``epoch``,
        ``global_step``, ``pytorch-lightning_version``) and :data:`CLIENT_SPEC_KEY`.

    """
    spec = getattr(module, "client_spec", None)
    if spec is None:
        raise ValueError(f"{type(module).__name__} has no client description to export (call setup_client first)")
    return {
        "state_dict": {name: value.detach().cpu().clone() for name, value in module.state_dict().items()},
        "hyper_parameters": dict(module.hparams),
        "epoch": 0,
        "global_step": 0,
        "pytorch-lightning_version": lightning.__version__,
        CLIENT_SPEC_KEY: spec.to_dict(),
    }


def save_lightning_checkpoint(module: LightningModule, path: str | os.PathLike[str]) -> Path:
    """Write :func:`lightning_checkpoint` of ``module`` to ``path`` (folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(lightning_checkpoint(module), path)
    return path


def export_clients(
    client_ids: Sequence[str],
    chosen: Sequence[str] | None,
    owns: Callable[[str], bool],
    module_of: Callable[[str], LightningModule],
    folder: Path,
) -> dict[str, Path]:
    """Write ``folder/<client>.ckpt`` for each chosen client (every client by default) that this process keeps.

    Args:
        client_ids: the federation's clients.
        chosen: the clients to export (``None``: all).
        owns: whether this process keeps a client.
        module_of: a client's trained module (``FederatedTrainer.client_module``).
        folder: where the files go.

    Returns:
        the files written, by client id.

    Raises:
        ValueError: naming the field ``clients`` when it names clients not in the federation.

    """
    unknown = sorted(set(chosen or ()) - set(client_ids))
    if unknown:
        raise ValueError(f"FederatedTrainer.export: field 'clients' names clients not in the federation: {unknown}")
    names = [cid for cid in (chosen or client_ids) if owns(cid)]
    return {cid: save_lightning_checkpoint(module_of(cid), folder / f"{cid}.ckpt") for cid in names}
