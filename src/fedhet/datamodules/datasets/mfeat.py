"""UCI Multiple Features: the same 2,000 handwritten digits seen through six feature sets ("views").

Source: R. P. W. Duin, "Multiple Features" data set, UCI Machine Learning Repository
(https://archive.ics.uci.edu/dataset/72/multiple+features); described in M. van Breukelen, R. P. W. Duin, D. M. J. Tax
and J. E. den Hartog (1998), "Handwritten digit recognition by combined classifiers", Kybernetika 34(4). Digits 0-9
extracted from a collection of Dutch utility maps, 200 per class. Licence: CC BY 4.0. The six files (as CSV with a
header row and the label last, rows sorted by class) are bundled in ``data/`` with their sha256.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from torch import Tensor

from fedhet.datamodules.client import ClientDataModule
from fedhet.datamodules.datasets._common import parse_csv, vendored_bytes
from fedhet.datamodules.datasets._views import ViewClientSettings, build_view_clients, resolve_client_classes
from fedhet.datamodules.splits import SplitFederation

VIEW_WIDTHS: dict[str, int] = {"fou": 76, "fac": 216, "kar": 64, "pix": 240, "zer": 47, "mor": 6}
"""The six views and their widths: Fourier coefficients of the character shapes (76), profile correlations (216),
Karhunen-Loève coefficients (64), pixel averages in 2x3 windows, i.e. a 16x15 image with grey levels 0..6 (240),
Zernike moments (47) and morphological features (6)."""

VIEWS: tuple[str, ...] = tuple(VIEW_WIDTHS)
"""The view names, in the canonical order of the federation's feature-block table."""

NUM_CLASSES = 10
NUM_SAMPLES = 2000


@dataclass(frozen=True)
class MultiViewData:
    """Several feature sets ("views") of the same samples.

    Attributes:
        views: view name to features of shape ``(N, width)``, ``float32``; row ``i`` of every view is sample ``i``.
        y: labels, shape ``(N,)``, ``int64``.

    """

    views: dict[str, Tensor]
    y: Tensor

    @property
    def view_widths(self) -> dict[str, int]:
        """Each view's width, in the order of ``views``."""
        return {name: int(x.shape[1]) for name, x in self.views.items()}


@cache
def _read_view(view: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse one bundled view file once: features ``(2000, width)`` and labels ``(2000,)``, read-only."""
    table = parse_csv(vendored_bytes(f"mfeat-{view}.csv.gz"), header=True)
    if table.shape != (NUM_SAMPLES, VIEW_WIDTHS[view] + 1):
        raise OSError(f"mfeat view {view!r} has shape {table.shape}, expected ({NUM_SAMPLES}, {VIEW_WIDTHS[view] + 1})")
    labels = table[:, -1].astype(np.int64)
    labels.flags.writeable = False
    return table[:, :-1].astype(np.float32), labels


def load_mfeat(views: Sequence[str] = VIEWS) -> MultiViewData:
    """Load the UCI Multiple Features digits, bundled with fedhet: 2,000 samples, 10 classes of 200, up to six views.

    Source: Duin, "Multiple Features", UCI Machine Learning Repository; van Breukelen et al. (1998), Kybernetika
    34(4). Licence CC BY 4.0. Values are as in the files (no scaling); rows are sorted by class (200 zeros first).

    Args:
        views: the views to load, from :data:`VIEWS` (widths fou 76, fac 216, kar 64, pix 240, zer 47, mor 6).

    Returns:
        the views in the order asked, each of shape ``(2000, width)`` (``float32``), and the labels ``(2000,)``.

    Raises:
        ValueError: for an unknown or repeated view.

    Example:
        >>> data = load_mfeat(["pix", "mor"])
        >>> data.view_widths, torch.bincount(data.y).tolist() == [200] * 10
        ({'pix': 240, 'mor': 6}, True)

    """
    _check_views(views, "views")
    labels = None
    tensors = {}
    for view in views:
        features, view_labels = _read_view(view)
        if labels is not None and not np.array_equal(labels, view_labels):
            raise OSError(f"mfeat view {view!r} lists its samples in another order than {views[0]!r}")
        labels = view_labels
        tensors[view] = torch.tensor(features)
    return MultiViewData(views=tensors, y=torch.tensor(labels))


def _check_views(views: Sequence[str], field: str) -> None:
    """Refuse an empty, unknown or repeated list of views."""
    unknown = [view for view in views if view not in VIEW_WIDTHS]
    if unknown or not views or len(set(views)) != len(views):
        raise ValueError(f"`{field}` must list distinct views from {list(VIEWS)}, got {list(views)}")


class MultipleFeaturesFederation(SplitFederation):
    """The Multiple Features digits shared among clients that each hold some views and some classes.

    Client ``k`` holds the views ``client_views[k]`` (its feature vector is their concatenation in that order, and its
    :class:`~fedhet.datamodules.ClientSpec` names them as ``feature_blocks``) and the samples of the classes
    ``client_classes[k]``. The default gives six clients one view each, all ten classes, disjoint samples: each client
    lives in its own feature space (the FLIC setting). Give clients several views, some shared, for a hybrid
    feature-block table (the HyFEM setting); :attr:`block_widths` is the table's full list of blocks.

    With ``disjoint_samples`` (the default) every class's samples are shuffled and dealt out in near-equal shares to
    the clients holding that class, so no two clients see the same digit; otherwise every client holding a class
    gets all of its samples (the same digits seen through different views). Each client then splits its samples at
    random into train, validation and test parts, and, with ``standardize``, standardises every column with the
    mean and standard deviation of **its own training part only**. Client ids are ``client_000``, ``client_001``...

    ``val_fraction``, ``test_fraction``, ``batch_size``, ``eval_batch_size`` and ``seed`` are the split arguments of
    :class:`~fedhet.datamodules.SplitFederation`, described there; below, only what they mean here.

    Args:
        client_views: one list of view names (from ``fou``, ``fac``, ``kar``, ``pix``, ``zer``, ``mor``) per client.
        client_classes: one list of digit classes per client; every client holds all ten when ``None``.
        disjoint_samples: whether clients that hold the same class share its samples out (``True``) or all get them.
        standardize: whether to standardise each client's features with its training statistics.
        seed: seed of the sharing and of the clients' splits.

    Example:
        >>> federation = MultipleFeaturesFederation(client_views=[["fou", "kar"], ["kar", "mor"]], seed=0)
        >>> [dict(spec.feature_blocks) for spec in federation.specs.values()]
        [{'fou': 76, 'kar': 64}, {'kar': 64, 'mor': 6}]
        >>> sum(spec.num_train + spec.num_test for spec in federation.specs.values())
        2000

    """

    def __init__(
        self,
        client_views: Sequence[Sequence[str]] = (("fou",), ("fac",), ("kar",), ("pix",), ("zer",), ("mor",)),
        client_classes: Sequence[Sequence[int]] | None = None,
        disjoint_samples: bool = True,
        standardize: bool = True,
        val_fraction: float = 0.0,
        test_fraction: float = 0.25,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not client_views:
            raise ValueError("`client_views` must list at least one client")
        for index, views in enumerate(client_views):
            _check_views(views, f"client_views[{index}]")
        self.client_views = [tuple(views) for views in client_views]
        self.client_classes = resolve_client_classes(client_classes, len(client_views), NUM_CLASSES)
        self._split_rows: dict[str, dict[str, np.ndarray]] = {}

    @property
    def block_widths(self) -> dict[str, int]:
        """The feature-block table: every view some client holds and its width, in the canonical view order."""
        held = {view for views in self.client_views for view in views}
        return {view: width for view, width in VIEW_WIDTHS.items() if view in held}

    @property
    def source_indices(self) -> dict[str, np.ndarray]:
        """Each client's rows of :func:`load_mfeat` (all its splits), sorted, by client id."""
        self.setup()
        return {
            client_id: np.sort(np.concatenate(list(parts.values()))) for client_id, parts in self._split_rows.items()
        }

    @property
    def split_rows(self) -> dict[str, dict[str, np.ndarray]]:
        """Each client's rows of :func:`load_mfeat` in its ``"train"``, ``"val"`` and ``"test"`` splits, by id."""
        self.setup()
        return {client_id: dict(parts) for client_id, parts in self._split_rows.items()}

    def build_clients(self) -> list[ClientDataModule]:
        """Share the samples, then split, standardise and assemble each client's views.

        Returns:
            the clients ``client_000``, ``client_001``, ...

        """
        config = self.hparams
        data = load_mfeat(list(self.block_widths))
        settings = ViewClientSettings.from_config(config)
        clients, self._split_rows = build_view_clients(
            data.views, data.y, NUM_CLASSES, self.client_views, self.client_classes, settings
        )
        return clients
