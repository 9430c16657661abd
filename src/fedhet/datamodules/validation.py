"""Checks of one client's tensors and of the split arguments, raising errors that name the owner and the field."""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral, Real

import torch
from torch import Tensor


def field_error(client_id: str, field: str, problem: str) -> str:
    """Format an error message about one field of one client.

    Args:
        client_id: the client's name.
        field: the argument or attribute at fault, e.g. ``"y_val"``.
        problem: what is wrong with it.

    Returns:
        the message, e.g. ``"client 'site_a': field 'y' has label 12 outside [0, 10) (1 sample)"``.

    """
    return f"client '{client_id}': field '{field}' {problem}"


def check_split_arguments(
    owner: str,
    val_fraction: float | None,
    test_fraction: float | None,
    batch_size: int,
    eval_batch_size: int,
    val_of_rest: bool = False,
) -> None:
    """Check the split arguments of a client or a federation (see :class:`~fedhet.datamodules.SplitFederation`).

    Args:
        owner: who took them, for the message: ``"client 'site_a'"`` or a federation's class name.
        val_fraction: share of the samples held out for validation, or ``None`` (not split by a share).
        test_fraction: share held out for testing, or ``None``.
        batch_size: training batch size.
        eval_batch_size: validation and test batch size.
        val_of_rest: ``val_fraction`` is a share of the samples left after the test part, so the two shares need not
            sum below 1.

    Raises:
        TypeError: ``"<owner>: field '<name>' is <value> (<type>); expected ..."``, a share that is not a number or a
            batch size that is not an int.
        ValueError: ``"<owner>: field '<name>' is <value>; expected ..."``, a share outside ``[0, 1)``, shares that
            leave no training samples, or a batch size below 1.

    """
    shares = {"val_fraction": val_fraction, "test_fraction": test_fraction}
    sizes = {"batch_size": batch_size, "eval_batch_size": eval_batch_size}
    typed = [(name, value, Real) for name, value in shares.items() if value is not None]
    for name, value, expected_type in [*typed, *((name, value, Integral) for name, value in sizes.items())]:
        if isinstance(value, bool) or not isinstance(value, expected_type):
            kind = "an int" if expected_type is Integral else "a number"
            raise TypeError(f"{owner}: field '{name}' is {value!r} ({type(value).__name__}); expected {kind}")
    for name, share in shares.items():
        if share is not None and not 0 <= share < 1:
            raise ValueError(f"{owner}: field '{name}' is {share}; expected a value in [0, 1)")
    if val_fraction is not None and test_fraction is not None and not val_of_rest and val_fraction + test_fraction >= 1:
        raise ValueError(
            f"{owner}: field 'test_fraction' is {test_fraction}; expected below 1 - val_fraction = {1 - val_fraction}"
        )
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{owner}: field '{name}' is {value}; expected at least 1")


def check_features(client_id: str, field: str, x: object, feature_shape: tuple[int, ...] | None = None) -> Tensor:
    """Check a feature tensor: a floating tensor of shape ``(N, *feature_shape)`` with only finite values.

    Args:
        client_id: the client's name, for the error message.
        field: the field's name, for the error message.
        x: the features to check.
        feature_shape: the per-sample shape ``x`` must have, e.g. that of the training features; any when ``None``.

    Returns:
        ``x``, now known to be a valid feature tensor.

    Raises:
        TypeError: when ``x`` is not a tensor or not floating point.
        ValueError: when its shape is wrong or some rows hold NaN or Inf.

    """
    if not isinstance(x, Tensor):
        raise TypeError(field_error(client_id, field, f"must be a torch.Tensor, got {type(x).__name__}"))
    if not x.is_floating_point():
        raise TypeError(field_error(client_id, field, f"has dtype {x.dtype}; features must be floating point"))
    if x.ndim < 2 or math.prod(x.shape[1:]) == 0:
        raise ValueError(
            field_error(client_id, field, f"has shape {tuple(x.shape)}; expected (num_samples, *feature_shape)")
        )
    if feature_shape is not None and tuple(x.shape[1:]) != feature_shape:
        raise ValueError(
            field_error(client_id, field, f"has per-sample shape {tuple(x.shape[1:])} but 'x' has {feature_shape}")
        )
    bad_rows = (~torch.isfinite(x.flatten(1)).all(dim=1)).nonzero().flatten()
    if len(bad_rows) > 0:
        raise ValueError(
            field_error(
                client_id, field, f"has {len(bad_rows)} rows with NaN or Inf values (first: row {int(bad_rows[0])})"
            )
        )
    return x


def check_labels(client_id: str, field: str, y: object, num_samples: int, num_classes: int) -> Tensor:
    """Check a label tensor: integers in ``[0, num_classes)``, one per sample.

    Args:
        client_id: the client's name, for the error message.
        field: the field's name, for the error message.
        y: the labels to check.
        num_samples: number of samples of the matching features.
        num_classes: size of the label space.

    Returns:
        ``y``, now known to be a valid label tensor.

    Raises:
        TypeError: when ``y`` is not a tensor or not of an integer dtype.
        ValueError: when its shape or length is wrong or a label is out of range.

    """
    if not isinstance(y, Tensor):
        raise TypeError(field_error(client_id, field, f"must be a torch.Tensor, got {type(y).__name__}"))
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise TypeError(field_error(client_id, field, f"has dtype {y.dtype}; labels must be integers"))
    if y.ndim != 1:
        raise ValueError(field_error(client_id, field, f"has shape {tuple(y.shape)}; expected (num_samples,)"))
    if len(y) != num_samples:
        raise ValueError(field_error(client_id, field, f"has {len(y)} labels for {num_samples} samples"))
    out_of_range = y[(y < 0) | (y >= num_classes)]
    if len(out_of_range) > 0:
        count = f"{len(out_of_range)} sample{'s' if len(out_of_range) > 1 else ''}"
        raise ValueError(
            field_error(client_id, field, f"has label {int(out_of_range[0])} outside [0, {num_classes}) ({count})")
        )
    return y


def check_feature_blocks(client_id: str, feature_blocks: Mapping[str, int], input_dim: int) -> None:
    """Check that named feature blocks have positive integer widths that add up to the flat feature dimension.

    Args:
        client_id: the client's name, for the error message.
        feature_blocks: ordered block names and widths.
        input_dim: number of features of one flattened sample.

    Raises:
        ValueError: when a width is not a positive integer or the widths do not sum to ``input_dim``.

    """
    for name, width in feature_blocks.items():
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(
                field_error(client_id, "feature_blocks", f"gives block '{name}' width {width!r}; expected int >= 1")
            )
    total = sum(feature_blocks.values())
    if feature_blocks and total != input_dim:
        raise ValueError(
            field_error(client_id, "feature_blocks", f"widths {dict(feature_blocks)} sum to {total}, not {input_dim}")
        )
