"""Your own domains for domain adaptation (FedDaDiL): one client per domain, from CSV files or your loader.

A domain-adaptation federation holds one client per domain in one feature space (one encoder serves them all):
labelled sources and an unlabelled target whose labels only serve evaluation. :class:`DomainFederation` builds it
from the user's data as :class:`~fedhet.datamodules.CSVFederation` does for tabular sites, with the target switch of
the bundled domain federations (``include_target=False`` for FedDaDiL's step 1, FedAvg on the sources).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import Tensor

from fedhet.datamodules.csv_client import read_labelled_csv
from fedhet.datamodules.csv_federation import resolve_csv_files
from fedhet.datamodules.domains import _DomainFederation
from fedhet.datamodules.loaders import resolve_loader

Domains = Mapping[str, tuple[Tensor, Tensor]]


def csv_domains(
    files: str | Sequence[str], num_classes: int, label_column: str = "label"
) -> dict[str, tuple[Tensor, Tensor]]:
    """One domain per CSV file (client id: the file name without ``.csv``), all with the same feature columns.

    Args:
        files: a folder (every ``*.csv`` in it, in name order) or a list of files.
        num_classes: size of the label space: every label is an integer in ``[0, num_classes)``.
        label_column: the column of class labels, in every file.

    Returns:
        each domain's features ``(N_d, F)`` (float32, as written: no standardisation, which would remove part of the
        shift between domains) and labels ``(N_d,)``, by client id.

    Raises:
        ValueError: naming the file (and row and column) for a bad cell or label, or a file whose feature columns
            differ from the first file's.

    """
    out: dict[str, tuple[Tensor, Tensor]] = {}
    first: tuple[str, list[str]] | None = None
    for path in resolve_csv_files(files):
        x, y, names = read_labelled_csv(path, label_column, num_classes)
        if first is None:
            first = (path.name, names)
        elif names != first[1]:
            raise ValueError(
                f"{path.name}: its feature columns {names} differ from {first[0]}'s {first[1]}; every domain needs the"
                " same columns, in the same order"
            )
        if path.stem in out:
            raise ValueError(f"DomainFederation: two files are named {path.name!r}; client ids must be unique")
        out[path.stem] = (x, y)
    return out


DATASETS: dict[str, Callable[..., Domains]] = {"csv": csv_domains}
"""Domain loaders known by name to :class:`DomainFederation` (``"csv"``: :func:`csv_domains`)."""


class DomainFederation(_DomainFederation):
    """Your own domains, one client each, for domain adaptation (FedDaDiL): from CSV files, your loader or tensors.

    ``data`` is ``"csv"`` (one CSV file per domain, :func:`csv_domains`, with ``data_args`` such as ``files`` and
    ``label_column``), an import path ``"package.module:function"`` of a loader returning ``{client_id: (x, y)}``
    (called with ``data_args``), a loader, or that mapping itself. Every domain has the same feature shape; labels
    are integers in ``[0, num_classes)``. Each client splits its samples at random into train, validation and test
    parts. ``target`` names the unlabelled target domain (give FedDaDiL the same ``target``); ``include_target:
    false`` leaves it out, for FedDaDiL's step 1 (FedAvg on the labelled sources).

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        num_classes: size of the label space.
        data: ``"csv"``, an import path, a loader, or ``{client_id: (x, y)}``.
        data_args: keyword arguments of the loader (``"csv"``: ``files`` and ``label_column``).
        target: client id of the target domain (``None``: no target).
        include_target: keep the target client.
        seed: seed of the splits.

    Raises:
        ValueError: naming the argument or the domain: an unknown loader, fractions out of range, and when the
            clients are built, domains whose feature shapes differ or whose labels fall outside ``[0, num_classes)``,
            or a ``target`` that names no domain.

    Example:
        >>> domains = {"a": (torch.randn(20, 3), torch.arange(20) % 2), "b": (torch.randn(12, 3), torch.arange(12) % 2)}
        >>> federation = DomainFederation(num_classes=2, data=domains, target="b", include_target=False)
        >>> federation.client_ids
        ['a']

    """

    def __init__(
        self,
        num_classes: int,
        data: str | Callable[..., Domains] | Domains = "csv",
        data_args: dict[str, Any] | None = None,
        target: str | None = None,
        include_target: bool = True,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__(ignore=[] if isinstance(data, str) else ["data"])
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"DomainFederation: field 'num_classes' must be a positive integer, got {num_classes!r}")
        self._loader = resolve_loader(data, DATASETS, "DomainFederation")
        if self._loader is None and not isinstance(data, Mapping):
            raise ValueError(
                f"DomainFederation: `data` must be a name, an import path, a loader or a mapping; got {type(data)}"
            )
        self._given = None if self._loader is not None else dict(cast("Domains", data))
        self._num_classes = num_classes
        self._data_args = dict(data_args or {})

    def num_domain_classes(self) -> int:
        """``num_classes``."""
        return self._num_classes

    def domains(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Every domain's ``(features, labels)``, loaded and checked."""
        args = dict(self._data_args)
        if self._loader is csv_domains:
            args.setdefault("num_classes", self._num_classes)
        loaded = self._loader(**args) if self._loader is not None else self._given
        if not isinstance(loaded, Mapping) or not loaded:
            raise ValueError(f"DomainFederation: `data` must give a non-empty mapping of domains; got {type(loaded)}")
        out: dict[str, tuple[Tensor, Tensor]] = {}
        shape = None
        for client_id, (x_raw, y_raw) in loaded.items():
            x, y = torch.as_tensor(x_raw).float(), torch.as_tensor(y_raw)
            if y.ndim != 1 or len(y) != len(x) or y.is_floating_point():
                raise ValueError(
                    f"DomainFederation: domain {client_id!r} must give x of shape (N, ...) and N integer labels; got x"
                    f" of shape {tuple(x.shape)} and y of shape {tuple(y.shape)} and dtype {y.dtype}"
                )
            if len(y) and (int(y.min()) < 0 or int(y.max()) >= self._num_classes):
                raise ValueError(
                    f"DomainFederation: domain {client_id!r} has labels outside [0, {self._num_classes}) (num_classes)"
                )
            if shape is not None and tuple(x.shape[1:]) != shape[1]:
                raise ValueError(
                    f"DomainFederation: domain {client_id!r} has features of shape {tuple(x.shape[1:])}, domain"
                    f" {shape[0]!r} {shape[1]}; one encoder needs one feature shape"
                )
            shape = shape or (str(client_id), tuple(x.shape[1:]))
            out[str(client_id)] = (x, y.long())
        return out
