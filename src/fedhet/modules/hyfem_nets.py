"""HyFEM's network: one MLP extractor per feature block, their outputs concatenated, then a hidden layer.

X. Zhang, W. Yin, T. Chen, M. Hong, "Hybrid Federated Learning for Feature & Sample Heterogeneity: Algorithms and
Implementation", TMLR 2024. The client modules (:class:`~fedhet.modules.HyFEM`) and the server model of
:class:`~fedhet.callbacks.ModelMatching` are both built from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedhet.modules.blocks import mlp


class HybridBody(nn.Module):
    """One MLP extractor per feature block, their outputs concatenated, then the classifier's hidden layer and ReLU.

    Args:
        block_widths: the blocks of the input, in the input's column order, and their widths.
        extractor_dims: hidden widths of every extractor (the last is its output width :math:`e`); empty for none.
        hidden_dim: the classifier's hidden width :math:`H`.

    Example:
        >>> body = HybridBody({"a": 3, "b": 2}, [4], hidden_dim=5)
        >>> tuple(body(torch.zeros(7, 5)).shape), body.feature_columns(["b"]).tolist()
        ((7, 5), [4, 5, 6, 7])

    """

    def __init__(self, block_widths: Mapping[str, int], extractor_dims: Sequence[int], hidden_dim: int) -> None:
        super().__init__()
        self.block_widths = dict(block_widths)
        self.extractors = nn.ModuleDict()
        self.feature_widths: dict[str, int] = {}
        for name, width in self.block_widths.items():
            self.extractors[name], self.feature_widths[name] = mlp(width, extractor_dims)
        self.hidden = nn.Linear(sum(self.feature_widths.values()), hidden_dim)

    def features(self, x: Tensor) -> Tensor:
        """Concatenated extractor outputs, shape ``(B, E)``, for inputs of shape ``(B, sum of block widths)``."""
        parts = x.flatten(1).split(list(self.block_widths.values()), dim=1)
        return torch.cat([self.extractors[name](part) for name, part in zip(self.block_widths, parts, strict=True)], 1)

    def forward(self, x: Tensor) -> Tensor:
        """Hidden activations, shape ``(B, H)``."""
        return F.relu(self.hidden(self.features(x)))

    def feature_columns(self, blocks: Sequence[str]) -> Tensor:
        """Positions in this body's concatenated features of the features of ``blocks`` (in that order), ``int64``."""
        offsets, start = {}, 0
        for name, width in self.feature_widths.items():
            offsets[name], start = start, start + width
        return torch.cat(
            [torch.arange(offsets[b], offsets[b] + self.feature_widths[b]) for b in blocks] or [torch.zeros(0).long()]
        )
