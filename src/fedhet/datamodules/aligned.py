"""A federation's clients in one column layout: the zero-filled union of their columns, or pooled into one client."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.federated import FederatedDataModule

Layout = Literal["union", "pooled"]


def _same(a: Any, b: Any) -> bool:
    """Equal, a list and a tuple with equal items included (a CLI gives lists where defaults are tuples)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return bool(a == b)


def _describe(federation: FederatedDataModule, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` of a federation: its class and the arguments that differ from the defaults.

    ``given`` is the federation's config when a CLI built it (LightningCLI hands the wrapper's config, not the inner
    federation's, to every class it builds for the ``data`` key, so the inner ``hparams`` are not its own there).
    """
    cls = type(federation)
    params = inspect.signature(cls.__init__).parameters
    defaults = {name: p.default for name, p in params.items() if p.default is not inspect.Parameter.empty}
    source = given.get("init_args", {}) if given is not None else getattr(federation, "hparams", {})
    init_args = {
        name: value
        for name, value in source.items()
        if name in params and (name not in defaults or not _same(defaults[name], value))
    }
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": init_args}


class AlignedFederation(FederatedDataModule):
    """Wrap a federation to give every client one column layout, or to pool the clients into one.

    The baselines of "Global Layers: Non-IID Tabular Federated Learning" need two views of a federation whose clients
    have different columns:

    * **union layout** (``layout="union"``): every client's features are placed in one layout, the union of the
      clients' column names (in order of first appearance), zeros where a client lacks a column. Columns with the
      same name are merged (FedAvg's common feature space). Features are already standardised per client, and a
      missing column filled with 0 before scaling standardises to 0, so this equals aligning the raw tables first;
    * **pooled** (``layout="pooled"``): one client ``"pooled"`` holding every client's splits in the union layout
      (the "Centralized" baseline, which breaks privacy); ``client_code_column`` may name a column to overwrite with
      the client's index (Covertype's wilderness area, constant within a client, becomes a real feature).

    Column names come from the inner federation's ``feature_names`` (a mapping ``client -> names`` or one sequence
    for every client), else from its clients' own ``feature_names`` when every client has them (a federation of
    :class:`~fedhet.datamodules.CSVClientDataModule`); without names, clients of equal width are taken to share
    columns position by position.

    Clients keep their batch sizes (the pooled client takes the first client's). ``hparams["federation"]`` records the
    wrapped federation as ``{"class_path", "init_args"}`` (non-default arguments), not the object.

    Args:
        federation: the federation to wrap (e.g. :class:`~fedhet.datamodules.datasets.heart.HeartFederation`).
        layout: ``"union"`` or ``"pooled"``.
        client_code_column: with ``layout="pooled"``, the column that receives the client index (0, 1, ...).

    Example:
        >>> data = {"a": (torch.rand(4, 2), torch.arange(4) % 2), "b": (torch.rand(3, 2), torch.arange(3) % 2)}
        >>> inner = FederatedDataModule.from_tensors(data, num_classes=2)
        >>> inner.feature_names = {"a": ("age", "sex"), "b": ("sbp", "age")}
        >>> aligned = AlignedFederation(inner, layout="union")
        >>> aligned.feature_names["b"], aligned.specs["b"].input_dim
        (('age', 'sex', 'sbp'), 3)

    """

    def __init__(
        self, federation: FederatedDataModule, layout: Layout = "union", client_code_column: str | None = None
    ) -> None:
        super().__init__()
        if layout not in ("union", "pooled"):
            raise ValueError(f"AlignedFederation: field 'layout' must be 'union' or 'pooled', got {layout!r}")
        if client_code_column is not None and layout != "pooled":
            raise ValueError("AlignedFederation: 'client_code_column' needs layout='pooled'")
        self.save_hyperparameters()
        given = self.hparams.get("federation")  # a config under LightningCLI, else the object
        self.hparams["federation"] = _describe(federation, given if isinstance(given, Mapping) else None)
        self.federation = federation
        self.layout = layout
        self.client_code_column = client_code_column
        self._names: dict[str, tuple[str, ...]] = {}
        self._union: tuple[str, ...] = ()

    @property
    def feature_names(self) -> dict[str, tuple[str, ...]]:
        """Every client's column names (the union), in feature order, by client id."""
        self.setup()
        return {cid: self._union for cid in self.client_ids}

    def _column_names(self) -> dict[str, tuple[str, ...]]:
        inner = self.federation
        names = getattr(inner, "feature_names", None)
        if isinstance(names, Mapping):
            return {cid: tuple(names[cid]) for cid in inner.client_ids}
        if isinstance(names, Sequence) and not isinstance(names, str):
            return {cid: tuple(names) for cid in inner.client_ids}
        own = {cid: getattr(inner.client(cid), "feature_names", None) for cid in inner.client_ids}
        if all(isinstance(client_names, Sequence) for client_names in own.values()):
            return {cid: tuple(client_names or ()) for cid, client_names in own.items()}
        widths = {cid: inner.specs[cid].input_dim for cid in inner.client_ids}
        if len(set(widths.values())) > 1:
            raise ValueError(
                f"AlignedFederation: layout={self.layout!r} needs column names, but {type(inner).__name__} has no"
                f" `feature_names` and its clients differ in width: {widths}"
            )
        return {cid: tuple(f"x{j}" for j in range(width)) for cid, width in widths.items()}

    def build_clients(self) -> list[ClientDataModule]:
        """Re-cut the inner federation's clients (set up first) as configured.

        Returns:
            one client per inner client (``layout="union"``), or the single ``"pooled"`` client.

        """
        inner = self.federation
        inner.setup()
        self._names = self._column_names()
        union: dict[str, int] = {}
        for names in self._names.values():
            for name in names:
                union.setdefault(name, len(union))
        self._union = tuple(union)

        def place(client_id: str, x: Tensor) -> Tensor:
            out = x.new_zeros(len(x), len(union))
            out[:, [union[name] for name in self._names[client_id]]] = x
            return out

        parts: dict[str, dict[str, tuple[Tensor, Tensor]]] = {}
        for cid in inner.client_ids:
            client = inner.client(cid)
            splits = {"train": client.train_dataset, "val": client.val_dataset, "test": client.test_dataset}
            parts[cid] = {name: (place(cid, split.x), split.y) for name, split in splits.items()}
        if self.layout == "pooled":
            if self.client_code_column is not None and self.client_code_column not in union:
                raise ValueError(f"AlignedFederation: no column {self.client_code_column!r}; columns: {self._union}")
            pooled = {}
            for split in ("train", "val", "test"):
                xs, ys = [], []
                for k, cid in enumerate(inner.client_ids):
                    x, y = parts[cid][split]
                    if self.client_code_column is not None:
                        x = x.clone()
                        x[:, union[self.client_code_column]] = float(k)
                    xs.append(x)
                    ys.append(y)
                pooled[split] = (torch.cat(xs), torch.cat(ys))
            first = inner.client(inner.client_ids[0])
            parts = {"pooled": pooled}
            defaults = {"pooled": (first.batch_size, first.eval_batch_size, first.seed)}
        else:
            defaults = {
                cid: (inner.client(cid).batch_size, inner.client(cid).eval_batch_size, inner.client(cid).seed)
                for cid in inner.client_ids
            }
        clients = []
        for cid, client_parts in parts.items():
            batch_size, eval_batch_size, seed = defaults[cid]
            held_out: dict[str, Any] = {}
            for name in ("val", "test"):
                x, y = client_parts[name]
                if len(y) > 0:
                    held_out[f"x_{name}"], held_out[f"y_{name}"] = x, y
            x, y = client_parts["train"]
            clients.append(
                ClientDataModule(
                    cid,
                    x,
                    y,
                    inner.num_classes,
                    batch_size=batch_size,
                    eval_batch_size=eval_batch_size,
                    seed=seed,
                    **held_out,
                )
            )
        return clients
