"""The description of one client that a method needs to build its per-client layers."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from fedhet.core.text import quoted


@dataclass(frozen=True)
class SpecLimits:
    """The bounds :meth:`ClientSpec.parse` holds a client description from outside the process to.

    Example:
        >>> SpecLimits(max_classes=10).max_classes
        10

    """

    max_features: int = 10_000_000
    """Most features in one sample (the product of ``input_shape``)."""

    max_classes: int = 1_000_000
    """Largest ``num_classes`` and most entries in ``classes``."""

    max_samples: int = 10**9
    """Largest ``num_train``, ``num_val`` and ``num_test``."""

    max_blocks: int = 10_000
    """Most entries in ``feature_blocks``."""

    max_id_length: int = 256
    """Most characters in ``client_id``."""


class _FieldError(ValueError):
    """What one field check raises: the reason, without the source and the field's name."""


def _count(value: object, low: int, high: int) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) in ``[low, high]``, else a :class:`_FieldError`."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise _FieldError(f"is a {type(value).__name__}, not an int")
    if not low <= value <= high:
        raise _FieldError(f"is {value}, outside [{low}, {high}]")
    return value


def _sequence(value: object, max_length: int) -> list[Any] | tuple[Any, ...]:
    """``value`` if it is a list or a tuple of at most ``max_length`` entries, else a :class:`_FieldError`."""
    if not isinstance(value, (list, tuple)):
        raise _FieldError(f"is a {type(value).__name__}, not a list")
    if len(value) > max_length:
        raise _FieldError(f"has {len(value)} entries, more than {max_length}")
    return value


def _client_id(value: object, limits: SpecLimits) -> str:
    if not isinstance(value, str) or not value:
        raise _FieldError("is not a non-empty str")
    if len(value) > limits.max_id_length:
        raise _FieldError(f"has {len(value)} characters, more than {limits.max_id_length}")
    return value


def _input_shape(value: object, limits: SpecLimits) -> tuple[int, ...]:
    shape = _sequence(value, limits.max_features)
    if not shape:
        raise _FieldError("is empty")
    sizes = tuple(_count(size, 1, limits.max_features) for size in shape)
    features = 1
    for size in sizes:  # a running product: never a huge number to compute
        features *= size
        if features > limits.max_features:
            raise _FieldError(f"has more than {limits.max_features} features")
    return sizes


def _classes(value: object, num_classes: int, limits: SpecLimits) -> tuple[int, ...]:
    classes = tuple(_count(label, 0, num_classes - 1) for label in _sequence(value, limits.max_classes))
    if len(set(classes)) != len(classes):
        raise _FieldError("repeats a class")
    return classes


def _feature_blocks(value: object, input_dim: int, limits: SpecLimits) -> dict[str, int]:
    pairs = list(value.items()) if isinstance(value, Mapping) else _sequence(value, limits.max_blocks)
    if len(pairs) > limits.max_blocks:
        raise _FieldError(f"has {len(pairs)} entries, more than {limits.max_blocks}")
    blocks: dict[str, int] = {}
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise _FieldError("holds an entry that is not a [name, width] pair")
        if pair[0] in blocks:
            raise _FieldError(f"names block {quoted(pair[0])} twice")
        blocks[pair[0]] = _count(pair[1], 1, limits.max_features)
    if blocks and sum(blocks.values()) != input_dim:
        raise _FieldError(f"widths sum to {sum(blocks.values())}, not to the input's {input_dim} features")
    return blocks


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
        """The inverse of :meth:`to_dict` (checked as :meth:`parse` checks)."""
        return cls.parse(fields, source="ClientSpec.from_dict")

    @classmethod
    def parse(cls, fields: object, source: str, limits: SpecLimits | None = None) -> ClientSpec:
        """A client description from outside the process (a file, a remote node), each field's type and range checked.

        Args:
            fields: what :meth:`to_dict` writes: a mapping of field names to plain lists, ints and strings.
            source: where ``fields`` came from (a file, a node), named in the error.
            limits: the bounds of the sizes and counts; :class:`SpecLimits`'s defaults when ``None``.

        Raises:
            ValueError: one line naming ``source`` and the offending field, for a field of the wrong type, out of
                range, missing or unknown.

        Example:
            >>> ClientSpec.parse({"client_id": "a", "input_shape": [4], "num_classes": 2}, "node 3").input_shape
            (4,)
            >>> ClientSpec.parse({"client_id": "a", "input_shape": [4], "num_classes": True}, "node 3")
            Traceback (most recent call last):
            ...
            ValueError: node 3: field 'num_classes' is a bool, not an int

        """
        limits = limits or SpecLimits()
        if not isinstance(fields, Mapping):
            raise ValueError(f"{source}: the client spec is a {type(fields).__name__}, not a mapping of fields")
        known = {spec_field.name for spec_field in _SPEC_FIELDS}
        unknown = next((name for name in fields if name not in known), None)
        if unknown is not None:
            raise ValueError(f"{source}: field {str(unknown)[: limits.max_id_length]!r} is not a ClientSpec field")
        checked: dict[str, Any] = {}
        for name, check in _field_checks(checked, limits):
            if name not in fields:
                if name in ("client_id", "input_shape", "num_classes"):
                    raise ValueError(f"{source}: field '{name}' is missing")
                continue
            try:
                checked[name] = check(fields[name])
            except _FieldError as error:
                raise ValueError(f"{source}: field '{name}' {error}") from None
        return cls(**checked)

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


_SPEC_FIELDS = fields(ClientSpec)


def _field_checks(checked: Mapping[str, Any], limits: SpecLimits) -> list[tuple[str, Any]]:
    """Each field's check, in an order where a check sees the fields it depends on already in ``checked``."""
    return [
        ("client_id", lambda value: _client_id(value, limits)),
        ("input_shape", lambda value: _input_shape(value, limits)),
        ("num_classes", lambda value: _count(value, 1, limits.max_classes)),
        ("classes", lambda value: _classes(value, checked["num_classes"], limits)),
        ("num_train", lambda value: _count(value, 0, limits.max_samples)),
        ("num_val", lambda value: _count(value, 0, limits.max_samples)),
        ("num_test", lambda value: _count(value, 0, limits.max_samples)),
        ("feature_blocks", lambda value: _feature_blocks(value, math.prod(checked["input_shape"]), limits)),
    ]
