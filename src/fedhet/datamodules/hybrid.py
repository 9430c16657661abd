"""Hybrid federations: a table of feature blocks x classes per client over a pooled multi-block dataset (HyFEM).

Zhang, Yin, Chen & Hong, "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and
Implementation", TMLR 2024, section 4: the pooled samples are split once into train, validation and test parts; a
client holds every training sample of its classes restricted to the columns of its blocks
(:func:`~fedhet.functional.hybrid_partition`), and is evaluated on **all** held-out samples (every class) restricted
to its blocks; the server model is evaluated on the held-out samples with every block.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule, held_out_splits
from fedhet.datamodules.csv_client import read_labelled_csv
from fedhet.datamodules.datasets._common import fit_standardizer
from fedhet.datamodules.loaders import resolve_loader
from fedhet.datamodules.splits import SplitFederation
from fedhet.datamodules.tensor_dataset import TensorBatchLoader, TensorPairDataset
from fedhet.functional.partition import grid_blocks, hybrid_partition, split_indices

BlockData = tuple[Tensor, Tensor, dict[str, np.ndarray]]
QUADRANTS = ("TL", "TR", "BL", "BR")


def digits_quadrants() -> BlockData:
    """scikit-learn's 1,797 8x8 digits in ``[0, 1]``, cut into four 4x4 quadrant blocks ``TL``, ``TR``, ``BL``, ``BR``.

    Returns:
        features ``(1797, 64)``, labels ``(1797,)`` and each block's 16 columns.

    """
    from fedhet.datamodules.partitioned import load_digits_pool

    x, y = load_digits_pool()
    tiles = grid_blocks((8, 8), (2, 2))
    return x, y, {name: tiles[str(k)] for k, name in enumerate(QUADRANTS)}


def mfeat_views(views: Sequence[str] | None = None) -> BlockData:
    """UCI Multiple Features (bundled): 2,000 digits, the six feature sets as blocks (fou, fac, kar, pix, zer, mor).

    Returns:
        the views concatenated ``(2000, 649)`` (fewer columns with fewer ``views``), labels and each view's columns.

    """
    from fedhet.datamodules.datasets.mfeat import VIEWS, load_mfeat

    data = load_mfeat(list(views or VIEWS))
    starts = np.cumsum([0, *data.view_widths.values()])
    columns = {name: np.arange(starts[k], starts[k + 1]) for k, name in enumerate(data.views)}
    return torch.cat(list(data.views.values()), dim=1), data.y, columns


def satellite_bands() -> BlockData:
    """Statlog Landsat Satellite (bundled): 6,435 3x3 neighbourhoods, the four spectral bands as blocks of nine columns.

    Returns:
        features ``(6435, 36)`` (values 0..255, file order), labels and each band's columns.

    """
    from fedhet.datamodules.datasets.satellite import BANDS, band_columns, load_satellite_table

    x, y = load_satellite_table()
    return x, y, {band: band_columns(band) for band in BANDS}


def synthetic_views(
    num_classes: int = 40,
    num_views: int = 4,
    samples_per_class: int = 100,
    latent_dim: int = 32,
    view_latent_dim: int = 8,
    view_dim: int = 16,
    latent_noise: float = 1.0,
    view_noise: float = 0.1,
    mean_scale: float = 1.0,
    seed: int = 0,
) -> BlockData:
    r"""Synthetic multi-view classes: every view sees a different random part of a shared class-dependent latent.

    Class means :math:`\mu_y \sim \mathcal N(0, s^2 I_r)`; a sample is :math:`z = \mu_y + \sigma_z\varepsilon`; view
    :math:`i` keeps a fixed random subset :math:`S_i` of ``view_latent_dim`` latent coordinates and is
    :math:`x_i = \tanh(A_i z_{S_i}) + \sigma_x\xi` with :math:`A_i` of ``N(0, 1/view_latent_dim)`` entries. One view
    is weakly informative; more views help, as the views of HyFEM's ModelNet40 settings do.

    Returns:
        features ``(num_classes * samples_per_class, num_views * view_dim)``, labels, and the views ``"v0"``, ...

    """
    g = torch.Generator().manual_seed(seed)
    means = mean_scale * torch.randn(num_classes, latent_dim, generator=g)
    y = torch.arange(num_classes).repeat_interleave(samples_per_class)
    z = means[y] + latent_noise * torch.randn(len(y), latent_dim, generator=g)
    views = []
    for _ in range(num_views):
        subset = torch.randperm(latent_dim, generator=g)[:view_latent_dim]
        a = torch.randn(view_dim, view_latent_dim, generator=g) / view_latent_dim**0.5
        views.append(torch.tanh(z[:, subset] @ a.T) + view_noise * torch.randn(len(y), view_dim, generator=g))
    columns = {f"v{i}": np.arange(i * view_dim, (i + 1) * view_dim) for i in range(num_views)}
    return torch.cat(views, dim=1), y, columns


def csv_blocks(
    path: str, blocks: Mapping[str, Sequence[str]], label_column: str = "label", num_classes: int | None = None
) -> BlockData:
    """Your own pooled samples from one CSV file, its columns grouped into named feature blocks.

    Args:
        path: the file: a header row, then one sample per row; numeric features and an integer label column.
        blocks: each block's columns, by block name, e.g. ``{"lab": ["age", "bp"], "imaging": ["v1", "v2"]}``; a
            column in no block is not used.
        label_column: the column of class labels.
        num_classes: size of the label space (labels in ``[0, num_classes)``); by default the labels present, which
            must then be ``0..K-1``.

    Returns:
        the features ``(N, F)``, labels ``(N,)`` and each block's columns (indices into the features).

    Raises:
        ValueError: naming the file (and row and column) for a bad cell or label
            (:func:`~fedhet.datamodules.csv_client.read_labelled_csv`), and naming the block for a column the file
            lacks or that another block holds too.

    """
    x, y, names = read_labelled_csv(path, label_column, num_classes)
    position = {name: j for j, name in enumerate(names)}
    owner: dict[str, str] = {}
    columns = {}
    for block, block_columns in blocks.items():
        for name in block_columns:
            if name not in position:
                raise ValueError(f"{Path(path).name}: block {block!r} names column {name!r}, which the file lacks")
            if name in owner:
                raise ValueError(f"{Path(path).name}: column {name!r} is in blocks {owner[name]!r} and {block!r}")
            owner[name] = block
        columns[str(block)] = np.array([position[name] for name in block_columns], dtype=np.int64)
    return x, y, columns


DATASETS: dict[str, Callable[..., BlockData]] = {
    "csv": csv_blocks,
    "digits": digits_quadrants,
    "mfeat": mfeat_views,
    "satellite": satellite_bands,
    "synthetic": synthetic_views,
}
"""Multi-block datasets known by name to :class:`HybridFederation` (``"csv"``: your own file, :func:`csv_blocks`)."""


class _HybridConfig(Protocol):
    """The arguments :class:`HybridFederation` keeps in ``self.hparams`` (read by attribute)."""

    data_args: dict[str, Any] | None
    val_fraction: float
    test_fraction: float
    split_shared: bool
    standardize: bool
    batch_size: int
    eval_batch_size: int
    seed: int


def _check_block_data(x: Any, y: Any, blocks: Any) -> BlockData:
    """The loaded ``(x, y, blocks)`` as tensors and column arrays, refused naming ``data`` when they do not fit."""
    x, y = torch.as_tensor(x).flatten(1).float(), torch.as_tensor(y)
    if y.ndim != 1 or len(y) != len(x) or len(y) == 0 or y.is_floating_point() or bool((y < 0).any()):
        raise ValueError(
            f"HybridFederation: `data` must give x of shape (N, F) and y of N integer labels >= 0; got x of shape"
            f" {tuple(x.shape)} and y of shape {tuple(y.shape)} and dtype {y.dtype}"
        )
    if not isinstance(blocks, Mapping) or not blocks:
        raise ValueError(f"HybridFederation: `data` must give a mapping of block names to columns; got {type(blocks)}")
    columns = {str(name): np.asarray(cols, dtype=np.int64).reshape(-1) for name, cols in blocks.items()}
    for name, cols in columns.items():
        if len(cols) == 0 or cols.min() < 0 or cols.max() >= x.shape[1]:
            raise ValueError(
                f"HybridFederation: block {name!r} must name columns in [0, {x.shape[1]}); got {cols.tolist()}"
            )
    return x, y.long(), columns


class HybridFederation(SplitFederation):
    """Clients that hold different feature blocks of different classes, evaluated on every class (HyFEM).

    The pooled data (``data``: ``"digits"`` quadrants, ``"mfeat"`` views, ``"satellite"`` bands or ``"synthetic"``
    views, or your own: ``"csv"``, a CSV file whose columns ``data_args`` groups into blocks (:func:`csv_blocks`), an
    import path ``"package.module:function"`` of a loader returning ``(x, y, {block: columns})``, a callable, or that
    triple itself; loaders get ``data_args``) are split per class into train, validation and test parts.
    ``assignment`` gives each client its blocks and classes; it holds the training samples of its classes restricted
    to its blocks (clients with the same block set split a shared class, see
    :func:`~fedhet.functional.hybrid_partition`), and its validation and test sets are **all** held-out samples
    restricted to its blocks. :meth:`global_dataloader` gives the held-out samples with every held block, for the
    server model; :attr:`block_widths` is the block table in the data's order.
    With ``standardize`` every column is standardised with the pooled training part's statistics.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        data: a name of :data:`DATASETS` (``"csv"``, ``"digits"``, ``"mfeat"``, ``"satellite"``, ``"synthetic"``),
            an import path of a loader, a loader, or ``(x, y, blocks)``: ``x`` of shape ``(N, F)`` (or ``(N, *shape)``,
            flattened), integer ``y`` of shape ``(N,)`` and ``blocks`` mapping each block name to its columns of the
            flattened ``x``.
        assignment: ``{client: {"blocks": [...], "classes": [...]}}``.
        data_args: keyword arguments of the loader (e.g. :func:`synthetic_views`' sizes).
        val_fraction: share of every class held out for validation.
        test_fraction: share of every class held out for testing.
        split_shared: clients with the same block set split a shared class's samples (else each gets them all).
        standardize: standardise every column with the training part's mean and deviation.
        seed: seed of the split and of the shared-class shuffles.

    Example:
        >>> table = {"a": {"blocks": ["TL", "BL"], "classes": [0, 1, 2, 3, 4]}, "b": {"blocks": ["TR"], "classes": [5]}}
        >>> federation = HybridFederation("digits", table, seed=0)
        >>> [dict(s.feature_blocks) for s in federation.specs.values()], federation.specs["b"].num_test
        ([{'TL': 16, 'BL': 16}, {'TR': 16}], 357)

    """

    def __init__(
        self,
        data: str | Callable[..., BlockData] | BlockData = "digits",
        assignment: dict[str, dict[str, list[Any]]] | None = None,
        data_args: dict[str, Any] | None = None,
        val_fraction: float = 0.2,
        test_fraction: float = 0.2,
        split_shared: bool = True,
        standardize: bool = False,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__(ignore=[] if isinstance(data, str) else ["data"])
        self._loader = resolve_loader(data, DATASETS, "HybridFederation")
        if self._loader is None and not (isinstance(data, Sequence) and len(data) == 3):
            raise ValueError(
                f"HybridFederation: `data` must be a name, an import path, a loader or (x, y, blocks); got {type(data)}"
            )
        if not assignment:
            raise ValueError("HybridFederation: field 'assignment' must give at least one client")
        if test_fraction <= 0:
            raise ValueError(f"HybridFederation: field 'test_fraction' is {test_fraction}; expected above 0")
        self._given = None if self._loader is not None else cast("BlockData", tuple(cast("Sequence[Any]", data)))
        self.assignment = {client: dict(row) for client, row in assignment.items()}
        self._global: dict[str, TensorPairDataset] = {}
        self._block_widths: dict[str, int] = {}
        self.unused_fraction = 0.0

    @property
    def block_widths(self) -> dict[str, int]:
        """Every block some client holds and its width, in the data's order (the server model's input)."""
        self.setup()
        return dict(self._block_widths)

    def global_dataloader(self, stage: str) -> TensorBatchLoader | list[TensorBatchLoader]:
        """Held-out ``"val"`` or ``"test"`` samples with every held block (in :attr:`block_widths` order)."""
        self.setup()
        data = self._global[stage]
        return TensorBatchLoader(data, cast(_HybridConfig, self.hparams).eval_batch_size) if len(data) else []

    def build_clients(self) -> list[ClientDataModule]:
        """Split the pooled data, share the training part by the table, give everyone the held-out parts."""
        config = cast(_HybridConfig, self.hparams)
        loaded = self._loader(**(config.data_args or {})) if self._loader is not None else self._given
        x, y, blocks = _check_block_data(*cast("BlockData", loaded))
        labels = y.numpy()
        parts: list[list[np.ndarray]] = [[], [], []]
        fractions = (1.0 - config.val_fraction - config.test_fraction, config.val_fraction, config.test_fraction)
        for value in np.unique(labels):
            members = np.flatnonzero(labels == value)
            for k, piece in enumerate(split_indices(len(members), fractions, config.seed + int(value))):
                parts[k].append(members[piece])
        train, val, test = (torch.from_numpy(np.sort(np.concatenate(p))) for p in parts)
        if config.standardize:
            mean, scale = fit_standardizer(x[train])
            x = (x - mean) / scale
        block_columns = cast("Mapping[Hashable, np.ndarray]", blocks)  # read only, so str keys are Hashable ones
        split = hybrid_partition(
            y[train], self.assignment, block_columns, config.seed, split_shared=config.split_shared
        )
        self.unused_fraction = split.unused_fraction
        held = {name for row in split.feature_blocks.values() for name in row}
        self._block_widths = {name: len(cols) for name, cols in blocks.items() if name in held}
        full = torch.from_numpy(np.concatenate([blocks[name] for name in self._block_widths]))
        self._global = {
            name: TensorPairDataset(x[rows][:, full], y[rows]) for name, rows in (("val", val), ("test", test))
        }
        clients = []
        for index, (client, rows) in enumerate(split.indices.items()):
            cols = torch.from_numpy(split.columns[client])
            held_out = held_out_splits((x[val][:, cols], y[val]), (x[test][:, cols], y[test]))
            clients.append(
                ClientDataModule(
                    client,
                    x[train[torch.from_numpy(rows)]][:, cols],
                    y[train[torch.from_numpy(rows)]],
                    int(labels.max()) + 1,
                    feature_blocks=split.feature_blocks[client],
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=config.seed + index,
                    **held_out,
                )
            )
        return clients
