"""One client's trained model as a Lightning checkpoint that its module class loads with ``load_from_checkpoint``.

A fedhet module builds its layers from the client's description (its ``client_spec``), so the checkpoint carries that
description beside Lightning's usual keys (``state_dict``, ``hyper_parameters``, ``pytorch-lightning_version``);
:meth:`fedhet.modules.FederatedModule.load_from_checkpoint` reads it back (:func:`read_client_checkpoint`) before the
layers are built. Everything in the checkpoint is tensors or plain Python, so it loads with ``weights_only=True``,
and it is read that way only. Files are written atomically; ``fedhet export`` names them by an encoded client id
(:func:`client_file_name`), with an index mapping ids to files (:func:`write_export_index`).
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import lightning
import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch import LightningModule
from torch import Tensor

from fedhet.core import ClientSpec, quoted
from fedhet.plugins.storage.files import atomic_torch_save, atomic_write, check_structure, hashed_name

#: the checkpoint key holding the client's description (``ClientSpec.to_dict()``)
CLIENT_SPEC_KEY = "fedhet_client_spec"

#: the file of an export folder that maps client ids to their files (JSON)
INDEX_NAME = "index.json"


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
    atomic_torch_save(lightning_checkpoint(module), path)
    return path


def client_file_name(client_id: str) -> str:
    """The file name of a client's export: a readable part of its id and a hash of it, valid for any id.

    Example:
        >>> client_file_name("site_a")
        'site_a-7b2012a3845f0277.ckpt'
        >>> client_file_name("../../etc/x")
        '______etc_x-56da1a2ef2dfa53b.ckpt'

    """
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', client_id[:40])}-{hashed_name(client_id)[:16]}.ckpt"


def write_export_index(folder: Path, client_ids: Iterable[str]) -> Path:
    """Write ``folder/index.json``, mapping each of ``client_ids`` (and those an earlier export left) to its file.

    An earlier index is untrusted: only its entries naming the file :func:`client_file_name` gives are kept.
    """
    path = folder / INDEX_NAME
    index: dict[str, str] = {}
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        earlier = {}
    if isinstance(earlier, dict):
        index = {
            cid: name for cid, name in earlier.items() if name == client_file_name(cid) and (folder / name).is_file()
        }
    index.update({cid: client_file_name(cid) for cid in client_ids})
    text = json.dumps(dict(sorted(index.items())), indent=1, ensure_ascii=False)
    atomic_write(path, lambda tmp: tmp.write_text(text + "\n", encoding="utf-8"))
    return path


def _load_weights_only(checkpoint_path: str | os.PathLike[str] | IO[bytes]) -> Any:
    """``torch.load(weights_only=True)`` of a local path, an ``fsspec`` path, an ``http(s)`` URL or an open file."""
    if not isinstance(checkpoint_path, (str, os.PathLike)):
        return torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    if str(checkpoint_path).startswith("http"):
        return torch.hub.load_state_dict_from_url(str(checkpoint_path), map_location="cpu", weights_only=True)
    with get_filesystem(str(checkpoint_path)).open(str(checkpoint_path), "rb") as f:
        return torch.load(f, map_location="cpu", weights_only=True)


def checkpoint_source(checkpoint_path: str | os.PathLike[str] | IO[bytes]) -> str:
    """How a message names a client checkpoint: ``checkpoint '<path>'``."""
    return f"checkpoint {str(checkpoint_path)!r}"


def read_client_checkpoint(
    checkpoint_path: str | os.PathLike[str] | IO[bytes],
) -> tuple[dict[str, Any], ClientSpec | None]:
    """Read a client checkpoint as data only, and the client description it holds (``None``: a plain Lightning one).

    Args:
        checkpoint_path: a local or ``fsspec`` path, an ``http(s)`` URL, or an open binary file.

    Returns:
        the checkpoint (on the CPU) and its :class:`~fedhet.core.ClientSpec`.

    Raises:
        ValueError: naming the file when it holds more than tensors and plain values (no pickled code is ever run),
            is nested too deep or too large (:func:`~fedhet.plugins.storage.files.check_structure`), is not a
            dictionary, or holds a client description with a field of the wrong type or out of range (naming the field).

    """
    source = checkpoint_source(checkpoint_path)
    try:
        checkpoint = _load_weights_only(checkpoint_path)
    except Exception as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(
            f"{source} could not be read as tensors and plain values (weights_only): {first_line}"
        ) from err
    check_structure(checkpoint, source)
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{source} holds a {type(checkpoint).__name__}, not a Lightning checkpoint dictionary")
    fields = checkpoint.get(CLIENT_SPEC_KEY)
    return checkpoint, ClientSpec.parse(fields, source) if fields is not None else None


def check_built_shapes(built: Mapping[str, Tensor], stored: Mapping[str, Any], source: str, strict: bool) -> None:
    """Refuse a checkpoint whose tensors are not the ones its module's hyperparameters build, before it is built.

    Args:
        built: the state of the module the checkpoint's hyperparameters build, built on the ``meta`` device
            (:func:`~fedhet.plugins.clients.meta_build.on_meta`: shapes, no memory).
        stored: the checkpoint's ``state_dict``.
        source: the file, for the message.
        strict: every tensor built must be stored and every tensor stored built (Lightning's ``strict``).

    Raises:
        ValueError: one line naming the file and the first tensor whose name or shape differs.

    Example:
        >>> built = {"w": torch.empty(60000, 60000, device="meta")}
        >>> check_built_shapes(built, {"w": torch.zeros(4, 4)}, "a.ckpt", strict=True)
        Traceback (most recent call last):
        ...
        ValueError: a.ckpt: its hyperparameters build tensor 'w' of shape (60000, 60000), but it holds (4, 4)

    """
    for name, tensor in stored.items():
        if name not in built:
            if strict:
                raise ValueError(f"{source}: holds tensor {quoted(name)}, which its hyperparameters do not build")
            continue
        held = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
        shape = tuple(built[name].shape)
        if held != shape:
            raise ValueError(
                f"{source}: its hyperparameters build tensor {quoted(name)} of shape {shape}, but it holds {held}"
            )
    missing = next((name for name in built if name not in stored), None)
    if strict and missing is not None:
        raise ValueError(f"{source}: its hyperparameters build tensor {quoted(missing)}, which it does not hold")


def in_memory(checkpoint: dict[str, Any]) -> IO[bytes]:
    """``checkpoint`` as an in-memory torch file, to hand to a loader that reads files (read once, checked once)."""
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    return buffer


def export_clients(
    client_ids: Sequence[str],
    chosen: Sequence[str] | None,
    owns: Callable[[str], bool],
    module_of: Callable[[str], LightningModule],
    folder: Path,
) -> dict[str, Path]:
    """Write ``folder/<file>.ckpt`` (:func:`client_file_name`) for each chosen client that this process keeps.

    Args:
        client_ids: the federation's clients.
        chosen: the clients to export (``None``: every client).
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
    return {cid: save_lightning_checkpoint(module_of(cid), folder / client_file_name(cid)) for cid in names}
