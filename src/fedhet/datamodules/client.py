"""The data of one federated client as a LightningDataModule: its splits, its feature space and its classes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import TypedDict

import torch
from lightning.pytorch import LightningDataModule
from torch import Tensor

from fedhet.core import ClientSpec
from fedhet.datamodules.tensor_dataset import TensorBatchLoader, TensorPairDataset
from fedhet.datamodules.validation import (
    check_feature_blocks,
    check_features,
    check_labels,
    check_split_arguments,
    field_error,
)
from fedhet.functional.partition import split_indices


@dataclass(frozen=True)
class _Splits:
    """The datasets a client's :meth:`ClientDataModule.setup` builds, and the description it derives from them."""

    train: TensorPairDataset
    val: TensorPairDataset
    test: TensorPairDataset
    spec: ClientSpec


class HeldOutSplits(TypedDict, total=False):
    """Validation and test tensors as keyword arguments of :class:`ClientDataModule`; a split not given is absent."""

    x_val: Tensor
    y_val: Tensor
    x_test: Tensor
    y_test: Tensor


def held_out_splits(val: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor]) -> HeldOutSplits:
    """A client's validation and test ``(x, y)`` as keyword arguments of :class:`ClientDataModule`.

    Args:
        val: validation features and labels.
        test: test features and labels.

    Returns:
        ``x_val``/``y_val`` and ``x_test``/``y_test``, leaving out a split without samples (an empty split is not
        passed, as with no held-out data).

    Example:
        >>> x, y = torch.rand(4, 2), torch.arange(4)
        >>> sorted(held_out_splits((x[:2], y[:2]), (x[:0], y[:0])))
        ['x_val', 'y_val']

    """
    splits: HeldOutSplits = {}
    if len(val[1]) > 0:
        splits["x_val"], splits["y_val"] = val
    if len(test[1]) > 0:
        splits["x_test"], splits["y_test"] = test
    return splits


class ClientDataModule(LightningDataModule):
    """One client's in-memory data: train, validation and test splits of ``(features, labels)`` tensors.

    Nothing is checked or split on construction beyond the scalar arguments. :meth:`setup` (idempotent, whatever the
    stage) checks every tensor, raising an error that names the client and the field, then splits off validation and
    test samples when they are given as fractions rather than as tensors. Batches are ``(x, y)`` pairs: ``x`` of shape
    ``(B, *feature_shape)`` in the features' dtype, ``y`` of shape ``(B,)`` as ``int64``.

    The module works on its own under a plain ``lightning.Trainer``; a :class:`~fedhet.datamodules.FederatedDataModule`
    holds many of them.

    Args:
        client_id: the client's name, unique in its federation.
        x: training features (or all features, when fractions are split off), shape ``(N, *feature_shape)``, floating
            point, finite.
        y: labels of ``x``, shape ``(N,)``, integers in ``[0, num_classes)``.
        num_classes: size of the federation's label space.
        x_val: validation features; when given, ``y_val`` must be too and ``val_fraction`` must be 0.
        y_val: validation labels.
        x_test: test features; when given, ``y_test`` must be too and ``test_fraction`` must be 0.
        y_test: test labels.
        val_fraction: share of ``(x, y)`` split off at random for validation.
        test_fraction: share of ``(x, y)`` split off at random for testing.
        feature_blocks: ordered named blocks that make up the flat feature vector and their widths, for hybrid
            (feature-block) methods; the widths must add up to the number of features.
        batch_size: training batch size.
        eval_batch_size: validation and test batch size.
        seed: seed of the validation/test split.

    Raises:
        ValueError: on construction, when a scalar argument is out of range or validation/test data are given both as
            tensors and as a fraction. :meth:`setup` raises ``TypeError``/``ValueError`` for bad tensors.

    Example:
        >>> x, y = torch.rand(20, 4), torch.arange(20) % 3
        >>> client = ClientDataModule("site_a", x, y, num_classes=3, test_fraction=0.25)
        >>> client.spec.num_train, client.spec.num_test, client.spec.classes
        (15, 5, (0, 1, 2))
        >>> x, y = next(iter(client.train_dataloader()))
        >>> tuple(x.shape), y.dtype
        ((15, 4), torch.int64)

    """

    def __init__(
        self,
        client_id: str,
        x: Tensor,
        y: Tensor,
        num_classes: int,
        *,
        x_val: Tensor | None = None,
        y_val: Tensor | None = None,
        x_test: Tensor | None = None,
        y_test: Tensor | None = None,
        val_fraction: float = 0.0,
        test_fraction: float = 0.0,
        feature_blocks: Mapping[str, int] | None = None,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.client_id = client_id
        _check_scalars(client_id, num_classes, val_fraction, test_fraction, batch_size, eval_batch_size)
        _check_held_out(client_id, "val", x_val, y_val, val_fraction)
        _check_held_out(client_id, "test", x_test, y_test, test_fraction)
        self.num_classes = num_classes
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.feature_blocks = dict(feature_blocks or {})
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.seed = seed
        self._inputs: dict[str, Tensor | None] = {
            "x": x,
            "y": y,
            "x_val": x_val,
            "y_val": y_val,
            "x_test": x_test,
            "y_test": y_test,
        }
        self._splits: _Splits | None = None

    def setup(self, stage: str | None = None) -> None:
        """Check the client's tensors and build its splits; later calls do nothing.

        All splits are built at once whatever ``stage`` is. The input tensors are released afterwards; the splits hold
        the data.

        Args:
            stage: the Lightning stage (``"fit"``, ``"validate"``, ``"test"``...); unused.

        Raises:
            TypeError: when features are not a floating tensor or labels not an integer tensor.
            ValueError: when a shape or length is wrong, features hold NaN/Inf, a label is outside
                ``[0, num_classes)``, the training split is empty, or ``feature_blocks`` do not match the features.

        """
        self._setup_splits()

    @property
    def spec(self) -> ClientSpec:
        """What a module may know about this client: feature shape, classes present, split sizes, feature blocks."""
        return self._setup_splits().spec

    @property
    def num_train_samples(self) -> int:
        """Number of training samples."""
        return self._setup_splits().spec.num_train

    @property
    def train_dataset(self) -> TensorPairDataset:
        """The training split; its ``x`` and ``y`` tensors are the client's training data."""
        return self._setup_splits().train

    @property
    def val_dataset(self) -> TensorPairDataset:
        """The validation split, possibly empty."""
        return self._setup_splits().val

    @property
    def test_dataset(self) -> TensorPairDataset:
        """The test split, possibly empty."""
        return self._setup_splits().test

    def train_dataloader(self) -> TensorBatchLoader:
        """Shuffled training batches of ``batch_size``; the last one may be smaller.

        The loader takes no ``torch.Generator``: each pass draws its order from the global torch RNG, so seeding that
        RNG (as the federation engine does per round and client) fixes the order.
        """
        return TensorBatchLoader(self._setup_splits().train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> TensorBatchLoader | list[TensorBatchLoader]:
        """Validation batches of ``eval_batch_size`` in order, or ``[]`` (Lightning's "no loader") when empty."""
        return _eval_loader(self._setup_splits().val, self.eval_batch_size)

    def test_dataloader(self) -> TensorBatchLoader | list[TensorBatchLoader]:
        """Test batches of ``eval_batch_size`` in order, or ``[]`` (Lightning's "no loader") when empty."""
        return _eval_loader(self._setup_splits().test, self.eval_batch_size)

    def _setup_splits(self) -> _Splits:
        """Return the splits, building them on the first call and releasing the input tensors then."""
        if self._splits is None:
            self._splits = self._build_splits()
            self._inputs.clear()
        return self._splits

    def _build_splits(self) -> _Splits:
        """Check the input tensors and build the splits and the client's description from them."""
        inputs = self._inputs
        x = check_features(self.client_id, "x", inputs["x"])
        y = check_labels(self.client_id, "y", inputs["y"], len(x), self.num_classes)
        feature_shape = tuple(x.shape[1:])
        check_feature_blocks(self.client_id, self.feature_blocks, math.prod(feature_shape))
        held_out: dict[str, TensorPairDataset] = {}
        for part in ("val", "test"):
            x_part, y_part = inputs[f"x_{part}"], inputs[f"y_{part}"]
            if x_part is not None:
                x_part = check_features(self.client_id, f"x_{part}", x_part, feature_shape)
                y_part = check_labels(self.client_id, f"y_{part}", y_part, len(x_part), self.num_classes)
                held_out[part] = TensorPairDataset(x_part, y_part.long())
        if len(x) == 0:
            raise ValueError(field_error(self.client_id, "x", "has no samples; a client needs training data"))

        train, val, test = self._split(x, y.long())
        if len(train) == 0:
            raise ValueError(
                field_error(
                    self.client_id,
                    "x",
                    f"has {len(x)} samples, none left for training after val_fraction={self.val_fraction} and"
                    f" test_fraction={self.test_fraction}",
                )
            )
        val, test = held_out.get("val", val), held_out.get("test", test)
        spec = ClientSpec(
            client_id=self.client_id,
            input_shape=feature_shape,
            num_classes=self.num_classes,
            classes=tuple(torch.unique(train.y).tolist()),
            num_train=len(train),
            num_val=len(val),
            num_test=len(test),
            feature_blocks=dict(self.feature_blocks),
        )
        return _Splits(train=train, val=val, test=test, spec=spec)

    def _split(self, x: Tensor, y: Tensor) -> tuple[TensorPairDataset, TensorPairDataset, TensorPairDataset]:
        """Split ``(x, y)`` at random into train, validation and test parts by the configured fractions."""
        if self.val_fraction == 0 and self.test_fraction == 0:
            return TensorPairDataset(x, y), TensorPairDataset(x[:0], y[:0]), TensorPairDataset(x[:0], y[:0])
        fractions = (1.0 - self.val_fraction - self.test_fraction, self.val_fraction, self.test_fraction)
        parts = [torch.from_numpy(part).to(x.device) for part in split_indices(len(x), fractions, self.seed)]
        train, val, test = (TensorPairDataset(x.index_select(0, part), y.index_select(0, part)) for part in parts)
        return train, val, test


def _eval_loader(dataset: TensorPairDataset, batch_size: int) -> TensorBatchLoader | list[TensorBatchLoader]:
    """Build an unshuffled loader over ``dataset``, or return ``[]`` when it is empty."""
    if len(dataset) == 0:
        return []
    return TensorBatchLoader(dataset, batch_size=batch_size, shuffle=False)


def _check_scalars(
    client_id: str, num_classes: int, val_fraction: float, test_fraction: float, batch_size: int, eval_batch_size: int
) -> None:
    """Check a client's id and scalar arguments, raising a ``TypeError``/``ValueError`` that names the first bad one."""
    if not isinstance(client_id, str):
        raise TypeError(field_error(str(client_id), "client_id", f"must be a str, got {type(client_id).__name__}"))
    if not client_id:
        raise ValueError(field_error(client_id, "client_id", "is empty; a client needs a name"))
    if isinstance(num_classes, bool) or not isinstance(num_classes, Integral):
        raise TypeError(
            field_error(client_id, "num_classes", f"is {num_classes!r} ({type(num_classes).__name__}); expected an int")
        )
    if num_classes < 1:
        raise ValueError(field_error(client_id, "num_classes", f"is {num_classes}; expected at least 1"))
    check_split_arguments(f"client '{client_id}'", val_fraction, test_fraction, batch_size, eval_batch_size)


def _check_held_out(client_id: str, part: str, x: Tensor | None, y: Tensor | None, fraction: float) -> None:
    """Check that a held-out part is given either as both tensors, or as a fraction, or not at all."""
    if (x is None) != (y is None):
        given, missing = (f"x_{part}", f"y_{part}") if y is None else (f"y_{part}", f"x_{part}")
        raise ValueError(field_error(client_id, missing, f"is missing while '{given}' is given; give both or neither"))
    if x is not None and fraction > 0:
        raise ValueError(
            field_error(client_id, f"{part}_fraction", f"is {fraction} while 'x_{part}' is given; use one or the other")
        )
