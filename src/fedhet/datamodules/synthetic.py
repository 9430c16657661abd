"""FLIC's synthetic toy federations: Gaussian classes, three per client, each client in its own feature space.

Both toys come from Rakotomamonjy et al. (2024), "Personalised Federated Learning On Heterogeneous Feature Spaces"
(TMLR), section 6 and appendix S3.1.1: :class:`NoisyFeaturesToy` appends a random number of noise features to every
client's inputs, :class:`LinearMappingToy` maps every client's inputs through its own random Gaussian matrix to a random
dimension.
"""

from __future__ import annotations

from typing import Literal, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.splits import SplitFederation
from fedhet.functional.feature_spaces import add_noise_features, random_linear_map
from fedhet.functional.partition import shard_label_skew

Imbalance = Literal["paper", "code", "none"]


class _ToyConfig(Protocol):
    """The arguments both toys keep in ``self.hparams`` (read by attribute)."""

    num_clients: int
    samples_per_class: int
    test_samples_per_class: int
    num_classes: int
    classes_per_client: int
    base_dim: int
    mean_std: float
    imbalance: Imbalance
    val_fraction: float
    batch_size: int
    eval_batch_size: int
    seed: int


class _NoisyFeaturesConfig(_ToyConfig, Protocol):
    """The ``self.hparams`` of :class:`NoisyFeaturesToy`."""

    min_added: int
    max_added: int
    noise_std: float


class _LinearMappingConfig(_ToyConfig, Protocol):
    """The ``self.hparams`` of :class:`LinearMappingToy`."""

    min_dim: int
    max_dim: int
    map_std: float


class _FlicToy(SplitFederation):
    """What both FLIC toys share: Gaussian class pools, the shard partition, the subsampling and the client builder.

    Subclasses take the arguments below (their test data is a pool of its own: no ``test_fraction``), call
    ``super().__init__()`` and implement :meth:`_transform`.
    """

    _client_classes: dict[str, tuple[int, ...]]
    _draws: dict[str, int | Tensor]
    _class_means: Tensor | None = None

    @property
    def client_classes(self) -> dict[str, tuple[int, ...]]:
        """The classes each client was given, by client id (the same in its train and test data)."""
        self.setup()
        return dict(self._client_classes)

    @property
    def feature_draws(self) -> dict[str, int | Tensor]:
        """What each client's feature-space transform drew, by client id (see the subclass)."""
        self.setup()
        return dict(self._draws)

    @property
    def class_means(self) -> Tensor:
        """The class means in the common base space, shape ``(num_classes, base_dim)``."""
        self.setup()
        assert self._class_means is not None
        return self._class_means

    def _transform(self, features: Tensor, seed: int) -> tuple[Tensor, int | Tensor]:
        """Move one client's features, shape ``(N, base_dim)``, to its own feature space; return them and the draw."""
        raise NotImplementedError

    def build_clients(self) -> list[ClientDataModule]:
        """Draw the class pools, share them among the clients, subsample and transform each client's data.

        Returns:
            the clients ``client_000``, ``client_001``, ...

        Raises:
            ValueError: when a class pool is too small for the clients that hold it.

        """
        config = cast(_ToyConfig, self.hparams)
        streams = np.random.SeedSequence(config.seed).spawn(4)
        means_rng, pool_rng, subsample_rng = (np.random.default_rng(stream) for stream in streams[:3])
        transform_seeds = streams[3].generate_state(config.num_clients)

        means = means_rng.normal(0.0, config.mean_std, size=(config.num_classes, config.base_dim))
        self._class_means = torch.as_tensor(means, dtype=torch.float32)
        self._client_classes, self._draws = {}, {}
        train_y = np.repeat(np.arange(config.num_classes), config.samples_per_class)
        test_y = np.repeat(np.arange(config.num_classes), config.test_samples_per_class)
        train_x = means[train_y] + pool_rng.standard_normal((len(train_y), config.base_dim))
        test_x = means[test_y] + pool_rng.standard_normal((len(test_y), config.base_dim))

        train_parts = shard_label_skew(
            train_y, config.num_clients, config.classes_per_client, int(pool_rng.integers(2**31))
        )
        test_parts = _same_classes_split(test_y, [np.unique(train_y[part]) for part in train_parts])
        width = max(3, len(str(config.num_clients - 1)))
        clients = []
        for index, (train_rows, test_rows) in enumerate(zip(train_parts, test_parts, strict=True)):
            client_id = f"client_{index:0{width}d}"
            train_rows = _subsample(train_rows, train_y, config.imbalance, subsample_rng)
            features = torch.as_tensor(np.concatenate([train_x[train_rows], test_x[test_rows]]), dtype=torch.float32)
            features, draw = self._transform(features, int(transform_seeds[index]))
            self._client_classes[client_id] = tuple(np.unique(train_y[train_rows]).tolist())
            self._draws[client_id] = draw
            clients.append(
                ClientDataModule(
                    client_id,
                    features[: len(train_rows)],
                    torch.as_tensor(train_y[train_rows]),
                    config.num_classes,
                    x_test=features[len(train_rows) :],
                    y_test=torch.as_tensor(test_y[test_rows]),
                    val_fraction=config.val_fraction,
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=int(np.random.SeedSequence([config.seed, index]).generate_state(1)[0]),
                )
            )
        return clients


class NoisyFeaturesToy(_FlicToy):
    r"""FLIC's "noisy features" toy: 20 Gaussian classes, 3 per client, each client with its own added noise features.

    As in Rakotomamonjy et al. (2024), "Personalised Federated Learning On Heterogeneous Feature Spaces" (TMLR),
    appendix S3.1.1: class means :math:`m_c \sim \mathcal{N}(0, 0.8^2 I_5)`, samples of class ``c`` drawn from
    :math:`\mathcal{N}(m_c, I_5)`, pools of 2,000 training and 1,000 test samples per class. The classes are shared
    out with :func:`~fedhet.functional.shard_label_skew` (each client holds ``classes_per_client`` distinct classes;
    each class's pool is split evenly among its holders) and a client's test samples come from the same classes. Each
    client then keeps a random share of its training samples (class imbalance, see ``imbalance``), draws
    :math:`a_i \sim \mathcal{U}\{1, \dots, 10\}` and appends :math:`a_i` standard normal noise features to its
    train and test samples (:func:`~fedhet.functional.add_noise_features`), so its input dimension is
    ``base_dim + a_i``. :attr:`feature_draws` holds each :math:`a_i`. Client ids are ``client_000``, ``client_001``...

    ``val_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there (the test data is a pool of its own); below, only
    what they mean here.

    Args:
        num_clients: number of clients ``b``.
        samples_per_class: training pool per class; more clients means fewer samples each.
        test_samples_per_class: test pool per class.
        num_classes: number of classes ``C``.
        classes_per_client: distinct classes per client.
        base_dim: dimension of the common Gaussian space.
        mean_std: standard deviation of the class means.
        min_added: fewest noise features a client appends.
        max_added: most noise features a client appends.
        noise_std: standard deviation of the noise features.
        imbalance: per-client training subsampling: ``"code"`` (the default, the reference code's rule) draws a
            share :math:`p \sim \mathcal{U}[0.05, 1]` or :math:`\mathcal{U}[0.15, 0.35]` with even odds and samples
            with replacement; ``"paper"`` keeps a share :math:`p \sim \mathcal{U}[0.05, 1]` (the rule the paper's
            text states); ``"none"`` keeps every sample. Either way it is done per class and keeps at least one sample
            of each, so a client keeps all its classes. The paper's toys are the code's: for 100 clients with 2
            classes each it reports about 16k (noisy) and 15k (linear) training samples, min 38 and max 400 per client;
            ``"code"`` gives 14.8k on average over 3 seeds (min 24 to 32, max about 395), the stated uniform rule
            20.8k.
        val_fraction: share of each client's training samples held out for validation.
        seed: seed of every draw.

    Example:
        >>> toy = NoisyFeaturesToy(num_clients=4, samples_per_class=30, test_samples_per_class=10, seed=0)
        >>> spec = toy.specs["client_000"]
        >>> len(spec.classes), spec.input_dim == 5 + toy.feature_draws["client_000"]
        (3, True)

    """

    def __init__(
        self,
        num_clients: int = 100,
        samples_per_class: int = 2000,
        test_samples_per_class: int = 1000,
        num_classes: int = 20,
        classes_per_client: int = 3,
        base_dim: int = 5,
        mean_std: float = 0.8,
        min_added: int = 1,
        max_added: int = 10,
        noise_std: float = 1.0,
        imbalance: Imbalance = "code",
        val_fraction: float = 0.0,
        batch_size: int = 100,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        _check_toy_arguments(
            cast(_ToyConfig, self.hparams),
            ("min_added", min_added >= 0, "non-negative"),
            ("max_added", min_added <= max_added, "at least min_added"),
            ("noise_std", noise_std >= 0, "non-negative"),
        )

    def _transform(self, features: Tensor, seed: int) -> tuple[Tensor, int | Tensor]:
        """Append the client's noise features; the draw is their number."""
        config = cast(_NoisyFeaturesConfig, self.hparams)
        return add_noise_features(
            features, seed, min_added=config.min_added, max_added=config.max_added, noise_std=config.noise_std
        )


class LinearMappingToy(_FlicToy):
    r"""FLIC's "linear mapping" toy: 20 Gaussian classes, 3 per client, each client seeing them through its own matrix.

    As :class:`NoisyFeaturesToy` (Rakotomamonjy et al. (2024), "Personalised Federated Learning On Heterogeneous
    Feature Spaces", TMLR, appendix S3.1.1), but with class means :math:`m_c \sim \mathcal{N}(0, 0.5^2 I_5)`, and
    each client draws a dimension :math:`d_i \sim \mathcal{U}\{3, \dots, 100\}` and a matrix
    :math:`L_i \in \mathbb{R}^{5 \times d_i}` with standard normal entries, then uses :math:`x L_i` for its train
    and test samples (:func:`~fedhet.functional.random_linear_map`). :attr:`feature_draws` holds each :math:`L_i`.
    The paper's test pool is 1,000 per class (the reference code's 2,000, and its dimensions 3 to 99, are a setting
    away; its ``main_flic.py`` gives this toy 2 classes per client unless told otherwise, the paper's Fig. 4 says 3).

    ``val_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there (the test data is a pool of its own); below, only
    what they mean here.

    Args:
        num_clients: number of clients ``b``.
        samples_per_class: training pool per class; more clients means fewer samples each.
        test_samples_per_class: test pool per class.
        num_classes: number of classes ``C``.
        classes_per_client: distinct classes per client.
        base_dim: dimension of the common Gaussian space.
        mean_std: standard deviation of the class means.
        min_dim: smallest mapped dimension.
        max_dim: largest mapped dimension.
        map_std: standard deviation of the entries of :math:`L_i`.
        imbalance: per-client training subsampling, as for :class:`NoisyFeaturesToy`.
        val_fraction: share of each client's training samples held out for validation.
        seed: seed of every draw.

    Example:
        >>> toy = LinearMappingToy(num_clients=4, samples_per_class=30, test_samples_per_class=10, seed=0)
        >>> matrix = toy.feature_draws["client_001"]
        >>> toy.specs["client_001"].input_dim == matrix.shape[1], 3 <= matrix.shape[1] <= 100
        (True, True)

    """

    def __init__(
        self,
        num_clients: int = 100,
        samples_per_class: int = 2000,
        test_samples_per_class: int = 1000,
        num_classes: int = 20,
        classes_per_client: int = 3,
        base_dim: int = 5,
        mean_std: float = 0.5,
        min_dim: int = 3,
        max_dim: int = 100,
        map_std: float = 1.0,
        imbalance: Imbalance = "code",
        val_fraction: float = 0.0,
        batch_size: int = 100,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        _check_toy_arguments(
            cast(_ToyConfig, self.hparams),
            ("min_dim", min_dim >= 1, "at least 1"),
            ("max_dim", min_dim <= max_dim, "at least min_dim"),
            ("map_std", map_std > 0, "positive"),
        )

    def _transform(self, features: Tensor, seed: int) -> tuple[Tensor, int | Tensor]:
        """Map the client's features through its random matrix; the draw is the matrix."""
        config = cast(_LinearMappingConfig, self.hparams)
        return random_linear_map(features, seed, min_dim=config.min_dim, max_dim=config.max_dim, std=config.map_std)


def _check_toy_arguments(config: _ToyConfig, *extra: tuple[str, bool, str]) -> None:
    """Check a toy's arguments, raising a ``ValueError`` that names the first bad one.

    Args:
        config: the toy's hyperparameters.
        *extra: the variant's own checks, as ``(field, valid, expected)``.

    Raises:
        ValueError: naming the first argument out of range.

    """
    checks = (
        ("num_clients", config.num_clients >= 1, "at least 1"),
        ("samples_per_class", config.samples_per_class >= 1, "at least 1"),
        ("test_samples_per_class", config.test_samples_per_class >= 0, "non-negative"),
        ("num_classes", config.num_classes >= 1, "at least 1"),
        ("classes_per_client", 1 <= config.classes_per_client <= config.num_classes, "in [1, num_classes]"),
        ("base_dim", config.base_dim >= 1, "at least 1"),
        ("mean_std", config.mean_std >= 0, "non-negative"),
        ("imbalance", config.imbalance in ("paper", "code", "none"), "'paper', 'code' or 'none'"),
        *extra,
    )
    for field, valid, expected in checks:
        if not valid:
            raise ValueError(f"`{field}` is {getattr(config, field)!r}; expected {expected}")


def _same_classes_split(labels: np.ndarray, client_classes: list[np.ndarray]) -> list[np.ndarray]:
    """Split each class's samples evenly, in order, among the clients that hold it (a test pool, given the train split).

    Args:
        labels: the pool's labels, shape ``(N,)``.
        client_classes: the classes of each client.

    Returns:
        each client's sorted sample indices.

    """
    pieces: list[list[np.ndarray]] = [[np.empty(0, dtype=np.int64)] for _ in client_classes]
    for value in np.unique(labels):
        holders = [client for client, classes in enumerate(client_classes) if value in classes]
        if holders:
            for client, piece in zip(
                holders, np.array_split(np.flatnonzero(labels == value), len(holders)), strict=True
            ):
                pieces[client].append(piece)
    return [np.sort(np.concatenate(client_pieces)) for client_pieces in pieces]


def _subsample(rows: np.ndarray, labels: np.ndarray, imbalance: str, rng: np.random.Generator) -> np.ndarray:
    """Keep a random share of one client's training rows, class by class, at least one row of each class.

    Args:
        rows: the client's training rows.
        labels: the pool's labels.
        imbalance: ``"paper"``, ``"code"`` or ``"none"`` (see :class:`NoisyFeaturesToy`).
        rng: the generator of the draws.

    Returns:
        the kept rows, sorted (with repeats under ``"code"``).

    """
    if imbalance == "none":
        return rows
    if imbalance == "code":
        share = rng.uniform(0.05, 1.0) if rng.random() < 0.5 else rng.uniform(0.15, 0.35)
    else:
        share = rng.uniform(0.05, 1.0)
    kept = []
    for value in np.unique(labels[rows]):
        members = rows[labels[rows] == value]
        count = max(1, int(share * len(members)))
        kept.append(rng.choice(members, size=count, replace=imbalance == "code"))
    return np.sort(np.concatenate(kept))
