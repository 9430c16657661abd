"""Clients that each hold some feature blocks ("views") and some classes of one pooled multi-view dataset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule, held_out_splits
from fedhet.datamodules.datasets._common import class_shares, derived_seed, fit_standardizer
from fedhet.functional.partition import split_indices


@dataclass(frozen=True)
class ViewClientSettings:
    """How :func:`build_view_clients` shares and splits the samples.

    Attributes:
        disjoint_samples: clients holding the same class share its samples out (``True``) or all get them.
        standardize: standardise each client's columns with its own training part's mean and deviation.
        val_fraction: share of each client's samples held out for validation.
        test_fraction: share of each client's samples held out for testing.
        batch_size: training batch size.
        eval_batch_size: validation and test batch size.
        seed: seed of the sharing and of the clients' splits.

    """

    disjoint_samples: bool
    standardize: bool
    val_fraction: float
    test_fraction: float
    batch_size: int
    eval_batch_size: int
    seed: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ViewClientSettings:
        """The settings a federation's saved hyperparameters name (other keys are ignored)."""
        return cls(**{field.name: config[field.name] for field in fields(cls)})


def resolve_client_classes(
    client_classes: Sequence[Sequence[int]] | None, num_clients: int, num_classes: int
) -> list[tuple[int, ...]]:
    """Each client's classes, sorted: every class when ``client_classes`` is None, else its checked lists.

    Raises:
        ValueError: naming the client whose list is bad (not distinct classes in ``[0, num_classes)``), or the count
            mismatch.

    """
    if client_classes is None:
        return [tuple(range(num_classes))] * num_clients
    if len(client_classes) != num_clients:
        raise ValueError(f"`client_classes` lists {len(client_classes)} clients but there are {num_clients}")
    for index, classes in enumerate(client_classes):
        if not classes or len(set(classes)) != len(classes) or not all(0 <= c < num_classes for c in classes):
            raise ValueError(
                f"`client_classes[{index}]` must list distinct classes in [0, {num_classes}), got {classes}"
            )
    return [tuple(sorted(classes)) for classes in client_classes]


def build_view_clients(
    views: dict[str, Tensor],
    labels: Tensor,
    num_classes: int,
    client_views: Sequence[Sequence[str]],
    client_classes: Sequence[Sequence[int]],
    settings: ViewClientSettings,
) -> tuple[list[ClientDataModule], dict[str, dict[str, np.ndarray]]]:
    """Deal the samples of each class to the clients holding it, split each client and assemble its views.

    Args:
        views: view name to features ``(N, width)``; row ``i`` of every view is sample ``i``.
        labels: labels ``(N,)`` in ``[0, num_classes)``.
        num_classes: size of the label space.
        client_views: each client's views, concatenated in that order into its feature vector (its ``feature_blocks``).
        client_classes: each client's classes.
        settings: sharing, splitting, standardisation and batching.

    Returns:
        the clients ``client_000``, ``client_001``, ... and, by client id, the rows of the pooled data in each one's
        ``"train"``, ``"val"`` and ``"test"`` splits.

    """
    labels_np = labels.numpy()
    num_clients = len(client_views)
    holders = [[k for k in range(num_clients) if c in client_classes[k]] for c in range(num_classes)]
    if settings.disjoint_samples:
        shares = class_shares(labels_np, holders, num_clients, settings.seed)
    else:
        shares = [np.flatnonzero(np.isin(labels_np, classes)) for classes in client_classes]
    width = max(3, len(str(num_clients - 1)))
    fractions = (1.0 - settings.val_fraction - settings.test_fraction, settings.val_fraction, settings.test_fraction)
    clients = []
    split_rows: dict[str, dict[str, np.ndarray]] = {}
    for index, (names, rows) in enumerate(zip(client_views, shares, strict=True)):
        client_id = f"client_{index:0{width}d}"
        client_seed = derived_seed(settings.seed, index)
        picked = torch.from_numpy(rows)
        x = torch.cat([views[name][picked] for name in names], dim=1)
        y = labels[picked]
        parts = split_indices(len(rows), fractions, client_seed)
        split_rows[client_id] = {name: rows[part] for name, part in zip(("train", "val", "test"), parts, strict=True)}
        train, val, test = (torch.from_numpy(part) for part in parts)
        if settings.standardize:
            mean, scale = fit_standardizer(x[train])
            x = (x - mean) / scale
        held_out = held_out_splits((x[val], y[val]), (x[test], y[test]))
        clients.append(
            ClientDataModule(
                client_id,
                x[train],
                y[train],
                num_classes,
                feature_blocks={name: int(views[name].shape[1]) for name in names},
                batch_size=settings.batch_size,
                eval_batch_size=settings.eval_batch_size,
                seed=client_seed,
                **held_out,
            )
        )
    return clients, split_rows
