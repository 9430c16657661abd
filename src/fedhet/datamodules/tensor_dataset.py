"""An in-memory ``(features, labels)`` dataset that hands a DataLoader whole batches in one indexing operation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset


class TensorPairDataset(Dataset[tuple[Tensor, Tensor]]):
    """Features and labels held as two tensors, fetched a whole batch at a time.

    ``torch.utils.data.DataLoader`` calls ``__getitems__`` with the batch's list of indices when a dataset defines
    it, so a batch costs two tensor gathers instead of one ``__getitem__`` per sample and a stacking collate. Give the
    loader :func:`collate_batched` as ``collate_fn``: the batch is already assembled. The batches equal those of
    ``TensorDataset(x, y)`` with the default collate, in the same order for the same sampler.

    Args:
        x: features, shape ``(N, *feature_shape)``.
        y: labels, shape ``(N,)``.

    Raises:
        ValueError: when ``x`` and ``y`` hold different numbers of samples.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> data = TensorPairDataset(torch.zeros(5, 3), torch.arange(5))
        >>> x, y = next(iter(DataLoader(data, batch_size=4, collate_fn=collate_batched)))
        >>> tuple(x.shape), y.tolist()
        ((4, 3), [0, 1, 2, 3])

    """

    def __init__(self, x: Tensor, y: Tensor) -> None:
        if len(x) != len(y):
            raise ValueError(f"`x` holds {len(x)} samples but `y` holds {len(y)}")
        self.x = x
        self.y = y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.x[index], self.y[index]

    def __getitems__(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        """Gather a whole batch.

        Args:
            indices: the batch's sample indices, length ``B``.

        Returns:
            features of shape ``(B, *feature_shape)`` and labels of shape ``(B,)``.

        """
        index = torch.as_tensor(indices, dtype=torch.long, device=self.x.device)
        return self.x.index_select(0, index), self.y.index_select(0, index)


def collate_batched(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    """Return a batch that :meth:`TensorPairDataset.__getitems__` has already assembled, unchanged.

    Args:
        batch: features of shape ``(B, *feature_shape)`` and labels of shape ``(B,)``.

    Returns:
        the same pair.

    """
    return batch


class TensorBatchLoader:
    """Minibatches of a :class:`TensorPairDataset` by tensor indexing, without ``DataLoader`` machinery.

    For data that already sits in memory as two tensors, a ``DataLoader`` spends more per batch on samplers, fetchers
    and profiling hooks than a small model spends on its step; this iterable only draws one permutation per pass (from
    the global torch RNG, so seeding it fixes the order), gathers the pass's samples in that order at once and slices
    them into batches (views). Any Lightning ``Trainer`` accepts it as a dataloader.

    Args:
        dataset: the in-memory split.
        batch_size: samples per batch; the last batch of a pass may be smaller.
        shuffle: draw a new order for each pass.

    Example:
        >>> loader = TensorBatchLoader(TensorPairDataset(torch.zeros(5, 3), torch.arange(5)), batch_size=2)
        >>> [y.tolist() for _, y in loader], len(loader)
        ([[0, 1], [2, 3], [4]], 3)

    """

    def __init__(self, dataset: TensorPairDataset, batch_size: int, shuffle: bool = False) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle

    def __len__(self) -> int:
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        x, y = self.dataset.x, self.dataset.y
        if not self.shuffle:
            yield from zip(x.split(self.batch_size), y.split(self.batch_size), strict=True)
            return
        order = torch.randperm(y.shape[0])
        if order.device != x.device:
            order = order.to(x.device)
        x, y = x.index_select(0, order), y.index_select(0, order)  # one gather per pass, not two per batch
        size = self.batch_size
        for start in range(0, y.shape[0], size):
            yield x[start : start + size], y[start : start + size]
