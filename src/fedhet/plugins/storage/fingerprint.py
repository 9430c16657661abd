"""What a federation run is, recorded in its checkpoints so that only the run a checkpoint belongs to resumes it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from fedhet.plugins.storage.callback_state import callback_keys, stateful


def data_digest(client: Any) -> str | None:
    """SHA-256 of a client's data: features and labels of its train, val and test splits.

    ``None`` when the client does not expose its splits as ``train_dataset``/``val_dataset``/``test_dataset`` with
    tensors ``x`` and ``y`` (then only the split sizes identify its data).
    """
    digest = hashlib.sha256()
    for split in ("train_dataset", "val_dataset", "test_dataset"):
        dataset = getattr(client, split, None)
        tensors = [t for t in (getattr(dataset, "x", None), getattr(dataset, "y", None)) if isinstance(t, Tensor)]
        if len(tensors) != 2:
            return None
        for tensor in tensors:
            digest.update(f"{split}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
            digest.update(_raw_bytes(tensor))
    return digest.hexdigest()


def _raw_bytes(tensor: Tensor) -> bytes:
    return tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def _canonical(value: Any) -> Any:
    """A plain, comparable form of a hyperparameter: containers and scalars as they are, other objects by class."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, Tensor):
        return {"tensor": hashlib.sha256(_raw_bytes(value)).hexdigest()}
    return f"<{type(value).__module__}.{type(value).__qualname__}>"


def run_fingerprint(
    module: Any, clients: Mapping[str, Any], sizes: Mapping[str, Any], callbacks: Iterable[Any]
) -> dict[str, Any]:
    """What a run is: its module class and hyperparameters, its clients' data and its stateful callbacks.

    Args:
        module: the federated LightningModule (its class path and ``hparams``).
        clients: ``client_id -> ClientDataModule``, in federation order (hashed with :func:`data_digest`).
        sizes: ``client_id -> ClientSpec`` (``num_train``, ``num_val``, ``num_test``).
        callbacks: the run's callbacks; the :func:`stateful` ones are listed by :func:`callback_keys`.

    Returns:
        plain containers, saved in the checkpoint and compared by :func:`fingerprint_differences`.

    """
    return {
        "module": f"{type(module).__module__}.{type(module).__qualname__}",
        "hparams": _canonical(dict(getattr(module, "hparams", {}))),
        "clients": {
            cid: {
                "sizes": [int(getattr(sizes[cid], f"num_{split}", -1)) for split in ("train", "val", "test")],
                "data": data_digest(client),
            }
            for cid, client in clients.items()
        },
        "callbacks": callback_keys(stateful(callbacks)),
    }


def fingerprint_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a checkpoint's fingerprint and this run's, one phrase per difference (empty: they match)."""
    differences = []
    if saved["module"] != current["module"]:
        differences.append(f"module class {saved['module']} (checkpoint) vs {current['module']} (this run)")
    old, new = saved["hparams"], current["hparams"]
    for name in sorted(set(old) | set(new)):
        if old.get(name, "<unset>") != new.get(name, "<unset>"):
            differences.append(
                f"hyperparameter '{name}' {old.get(name, '<unset>')!r} (checkpoint) vs {new.get(name, '<unset>')!r}"
                " (this run)"
            )
    old, new = saved["clients"], current["clients"]
    if list(old) != list(new):
        differences.append(f"client ids {list(old)} (checkpoint) vs {list(new)} (this run)")
    for cid in (c for c in new if c in old):
        if old[cid]["sizes"] != new[cid]["sizes"]:
            differences.append(
                f"client '{cid}' train/val/test sizes {old[cid]['sizes']} (checkpoint) vs {new[cid]['sizes']}"
                " (this run)"
            )
        elif old[cid]["data"] != new[cid]["data"]:
            differences.append(f"client '{cid}' data content (its hash differs)")
    if saved["callbacks"] != current["callbacks"]:
        differences.append(f"stateful callbacks {saved['callbacks']} (checkpoint) vs {current['callbacks']} (this run)")
    return differences
