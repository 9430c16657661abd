"""A federation over scikit-learn's bundled 8x8 handwritten digits, split among clients with Dirichlet label skew."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.splits import SplitFederation
from fedhet.functional.partition import dirichlet_label_skew

NUM_CLASSES = 10
NUM_FEATURES = 64


class DigitsFederation(SplitFederation):
    """The 1,797 8x8 digit images bundled with scikit-learn, shared among clients with Dirichlet label skew.

    Each sample is 64 pixel intensities in ``[0, 16]``, scaled here to ``[0, 1]`` as ``float32``; labels are the
    digits 0-9 as ``int64``. The data ship with scikit-learn (``sklearn.datasets.load_digits``), so nothing is
    downloaded. They are the test part of the UCI "Optical Recognition of Handwritten Digits" data set (optdigits),
    collected by E. Alpaydin and C. Kaynak; see Alpaydin and Kaynak (1998), "Cascading Classifiers", Kybernetika 34(4).

    The samples are shared with :func:`~fedhet.functional.dirichlet_label_skew`; each client then splits its own
    samples at random into train, validation and test parts, with a seed derived from ``seed`` and its index. Client
    ids are ``client_000``, ``client_001``, ... All clients share one 64-dimensional feature space. The arguments are
    kept in ``self.hparams``.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        num_clients: number of clients.
        alpha: Dirichlet concentration of the label skew; smaller is more skewed.
        min_samples: fewest samples a client may receive before its own split.
        seed: seed of the partition and of the clients' splits.

    Example:
        >>> federation = DigitsFederation(num_clients=4, seed=1)
        >>> federation.num_clients, federation.specs["client_000"].input_shape
        (4, (64,))
        >>> sum(len(indices) for indices in federation.source_indices.values())
        1797

    """

    def __init__(
        self,
        num_clients: int = 10,
        alpha: float = 0.5,
        min_samples: int = 10,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self._source_indices: dict[str, np.ndarray] = {}

    @property
    def declared_num_classes(self) -> int:
        """The ten digits."""
        return NUM_CLASSES

    @property
    def declared_input_features(self) -> int:
        """The 64 pixels of an 8x8 image."""
        return NUM_FEATURES

    @property
    def source_indices(self) -> dict[str, np.ndarray]:
        """Each client's rows of ``load_digits()`` (train, validation and test together), sorted, by client id."""
        self.setup()
        return dict(self._source_indices)

    def build_clients(self) -> list[ClientDataModule]:
        """Load the digits, share them among the clients and make one datamodule per client.

        Returns:
            the clients ``client_000``, ``client_001``, ...

        """
        from sklearn.datasets import load_digits

        digits = load_digits()
        x = torch.as_tensor(digits.data / 16.0, dtype=torch.float32)
        y = torch.as_tensor(digits.target, dtype=torch.int64)
        config: Any = self.hparams  # the __init__ arguments, by name
        parts = dirichlet_label_skew(y, config.num_clients, config.alpha, config.seed, min_samples=config.min_samples)
        width = max(3, len(str(len(parts) - 1)))
        clients = []
        for index, rows in enumerate(parts):
            client_id = f"client_{index:0{width}d}"
            self._source_indices[client_id] = rows
            picked = torch.from_numpy(rows)
            clients.append(
                ClientDataModule(
                    client_id,
                    x.index_select(0, picked),
                    y.index_select(0, picked),
                    NUM_CLASSES,
                    val_fraction=config.val_fraction,
                    test_fraction=config.test_fraction,
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=int(np.random.SeedSequence([config.seed, index]).generate_state(1)[0]),
                )
            )
        return clients
