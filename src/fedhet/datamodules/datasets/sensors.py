"""Real multichannel sensor recordings as BCI-like clients: each client its own channel montage, covariance features.

FLIC's BCI experiment (Rakotomamonjy et al., TMLR 2024, appendix S3.2) gives every subject of six EEG datasets its own
set of electrodes and turns each trial into the tangent vector of its channel covariance, so clients differ in input
dimension (:math:`c(c+1)/2` for :math:`c` channels) while sharing the label space. MOABB's EEG needs a download; this
stand-in does the same with the multichannel series that ship inside sktime: JapaneseVowels (640 utterances of 9
speakers, 12 LPC-cepstrum channels, 7 to 29 frames; Kudo, Toyama & Shimbo 1999, UCI Machine Learning Repository, CC BY
4.0) with the speaker as the class, or BasicMotions (80 recordings, 6 accelerometer and gyroscope channels, 4
activities).
"""

from __future__ import annotations

from functools import cache
from typing import Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.datasets._common import class_shares, derived_seed
from fedhet.datamodules.splits import SplitFederation
from fedhet.functional.spd import tangent_vectors, trial_covariances

SENSOR_DATASETS: dict[str, tuple[int, int]] = {"japanese_vowels": (12, 9), "basic_motions": (6, 4)}
"""The sensor datasets and their ``(channels, classes)``."""


@cache
def load_sensor_series(dataset: str) -> tuple[list[np.ndarray], np.ndarray]:
    """The trials of one sktime dataset (train and test parts together) and their integer labels.

    Needs ``pip install sktime`` (its data files ship inside the wheel; nothing is downloaded).

    Args:
        dataset: ``"japanese_vowels"`` or ``"basic_motions"``.

    Returns:
        one ``(channels, time steps)`` float64 array per trial (lengths may differ), and labels ``0..K-1``.

    """
    if dataset not in SENSOR_DATASETS:
        raise ValueError(f"unknown sensor dataset {dataset!r}; expected one of {list(SENSOR_DATASETS)}")
    try:
        from sktime.datasets import load_basic_motions, load_japanese_vowels
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(f"the {dataset!r} sensor data ship with sktime: pip install sktime") from err
    loader = load_japanese_vowels if dataset == "japanese_vowels" else load_basic_motions
    frame, labels = loader(return_type="nested_univ")
    trials = [
        np.stack([np.asarray(frame.iloc[i, j], dtype=np.float64) for j in range(frame.shape[1])])
        for i in range(len(frame))
    ]
    _, codes = np.unique(np.asarray(labels), return_inverse=True)
    return trials, codes.astype(np.int64)


class _SensorConfig(Protocol):
    """The arguments :class:`SensorCovarianceFederation` keeps in ``self.hparams`` (read by attribute)."""

    dataset: str
    num_clients: int
    min_channels: int
    max_channels: int
    classes_per_client: int | None
    shrinkage: float
    val_fraction: float
    test_fraction: float
    batch_size: int
    eval_batch_size: int
    seed: int


class SensorCovarianceFederation(SplitFederation):
    """Clients that each record a random subset of a sensor dataset's channels, with covariance tangent features.

    Client ``i`` draws its number of channels uniformly in ``[min_channels, max_channels]`` and that many channels at
    random (its "montage"), and holds ``classes_per_client`` classes (consecutive runs of a seeded permutation, so every
    class is held when there are enough clients; a class's trials are shared among its holders). Each trial becomes
    the log-Euclidean tangent vector (at the identity) of its shrunk channel covariance
    (:func:`~fedhet.functional.trial_covariances`, :func:`~fedhet.functional.tangent_vectors`), of dimension
    :math:`c_i(c_i+1)/2`; channels are first scaled by their standard deviation over the whole dataset (a fixed
    per-channel constant of the sensor, not fitted per client). Each client splits its trials at random into train,
    validation and test parts. Client ids are ``client_00``, ``client_01``...

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        dataset: ``"japanese_vowels"`` (12 channels, 9 speakers) or ``"basic_motions"`` (6 channels, 4 activities).
        num_clients: number of clients.
        min_channels: fewest channels of a client.
        max_channels: most channels of a client (at most the dataset's).
        classes_per_client: classes held by each client (``None``: all).
        shrinkage: covariance shrinkage towards the scaled identity.
        val_fraction: share of each client's trials held out for validation.
        test_fraction: share of each client's trials held out for testing.
        seed: seed of the montages, the class assignment, the sharing and the splits.

    """

    def __init__(
        self,
        dataset: str = "japanese_vowels",
        num_clients: int = 12,
        min_channels: int = 3,
        max_channels: int = 12,
        classes_per_client: int | None = 4,
        shrinkage: float = 0.1,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 100,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if dataset not in SENSOR_DATASETS:
            raise ValueError(f"`dataset` must be one of {list(SENSOR_DATASETS)}, got {dataset!r}")
        channels, classes = SENSOR_DATASETS[dataset]
        if not 1 <= min_channels <= max_channels <= channels:
            raise ValueError(
                f"`min_channels` and `max_channels` must satisfy 1 <= min <= max <= {channels}, got {min_channels},"
                f" {max_channels}"
            )
        if classes_per_client is not None and not 1 <= classes_per_client <= classes:
            raise ValueError(f"`classes_per_client` must be in [1, {classes}], got {classes_per_client}")
        if num_clients < 1:
            raise ValueError(f"`num_clients` must be at least 1, got {num_clients}")
        self._montages: dict[str, np.ndarray] = {}

    @property
    def montages(self) -> dict[str, np.ndarray]:
        """Each client's channels (indices into the dataset's channels), by client id."""
        self.setup()
        return dict(self._montages)

    def _features(self, trials: list[np.ndarray], channels: np.ndarray, scale: np.ndarray) -> Tensor:
        shrinkage = cast(_SensorConfig, self.hparams).shrinkage
        covariances = torch.stack(
            [
                trial_covariances(torch.as_tensor(t[channels] / scale[channels, None])[None], shrinkage)[0]
                for t in trials
            ]
        )
        return tangent_vectors(covariances).float()

    def build_clients(self) -> list[ClientDataModule]:
        """Draw the montages and classes, share the trials and featurise each client's trials on its own channels."""
        config = cast(_SensorConfig, self.hparams)
        trials, labels = load_sensor_series(config.dataset)
        channels, num_classes = SENSOR_DATASETS[config.dataset]
        scale = np.concatenate(trials, axis=1).std(axis=1)
        rng = np.random.default_rng(derived_seed(config.seed, 3000))
        per_client = config.classes_per_client or num_classes
        order = rng.permutation(num_classes)
        holders: list[list[int]] = [[] for _ in range(num_classes)]
        for client in range(config.num_clients):
            for step in range(per_client):
                holders[order[(client * per_client + step) % num_classes]].append(client)
        shares = class_shares(labels, holders, config.num_clients, derived_seed(config.seed, 3001))
        width = max(2, len(str(config.num_clients - 1)))
        clients = []
        for index, rows in enumerate(shares):
            client_id = f"client_{index:0{width}d}"
            count = int(rng.integers(config.min_channels, config.max_channels + 1))
            montage = np.sort(rng.choice(channels, size=count, replace=False))
            self._montages[client_id] = montage
            clients.append(
                ClientDataModule(
                    client_id,
                    self._features([trials[r] for r in rows], montage, scale),
                    torch.as_tensor(labels[rows]),
                    num_classes,
                    val_fraction=config.val_fraction,
                    test_fraction=config.test_fraction,
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=derived_seed(config.seed, index),
                )
            )
        return clients
