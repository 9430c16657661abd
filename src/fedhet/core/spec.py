"""The description of one client that a method needs to build its per-client layers."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ClientSpec:
    """What a federated module may know about one client before training.

    A module reads this in :meth:`~fedhet.modules.FederatedModule.setup_client` to size the layers that depend on
    the client's data: an input layer for the client's own feature space, an output layer for its classes.

    Args:
        client_id: the client's name, unique in its federation.
        input_shape: the shape of one sample's features, e.g. ``(64,)`` for flat tabular features or ``(1, 28, 28)``
            for an image.
        num_classes: size of the federation's label space; labels are integers in ``[0, num_classes)``.
        classes: the classes present in the client's training split, sorted.
        num_train: number of training samples.
        num_val: number of validation samples.
        num_test: number of test samples.
        feature_blocks: for hybrid (feature-block) settings, the ordered named blocks the client holds and their
            widths; the flat feature vector is their concatenation in this order. Empty when not used.

    Example:
        >>> spec = ClientSpec("site_a", input_shape=(8,), num_classes=3, classes=(0, 2), num_train=10)
        >>> spec.input_dim
        8

    """

    client_id: str
    input_shape: tuple[int, ...]
    num_classes: int
    classes: tuple[int, ...] = ()
    num_train: int = 0
    num_val: int = 0
    num_test: int = 0
    feature_blocks: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The description as plain lists, ints and strings (what ``torch.load(weights_only=True)`` reads back)."""
        return {
            "client_id": self.client_id,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "classes": list(self.classes),
            "num_train": self.num_train,
            "num_val": self.num_val,
            "num_test": self.num_test,
            "feature_blocks": [[name, width] for name, width in self.feature_blocks.items()],
        }

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> ClientSpec:
        """The inverse of :meth:`to_dict`."""
        return cls(
            **{
                **fields,
                "input_shape": tuple(fields["input_shape"]),
                "classes": tuple(fields["classes"]),
                "feature_blocks": {name: width for name, width in fields["feature_blocks"]},
            }
        )

    @property
    def input_dim(self) -> int:
        """Number of input features of one flattened sample."""
        return math.prod(self.input_shape)

    @property
    def block_widths(self) -> dict[str, int]:
        """The client's feature blocks and their widths in its feature order; one block ``"input"`` when it names none.

        Example:
            >>> ClientSpec("a", (5,), num_classes=2).block_widths
            {'input': 5}

        """
        return dict(self.feature_blocks) or {"input": self.input_dim}

    def architecture_key(self) -> Hashable:
        """What two clients must share to be able to use identically shaped layers by default."""
        return (self.input_shape, tuple(self.feature_blocks.items()), self.num_classes)
