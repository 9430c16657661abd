"""What a client may upload: the declaration a method makes, and the check of an upload against it.

A module declares, as a function of its client's description, the statistics it uploads besides its shared
parameters (their names, shapes and dtypes) and the names of the training metrics it logs
(:meth:`~fedhet.core.FederatedModuleProtocol.upload_declaration`); the engine knows the shared parameters' names,
shapes and dtypes from its own build of the client's architecture. :func:`upload_mismatch` holds an upload to both
before any server step sees it, in a simulation (where it catches a module that uploads what it did not declare) and
on a deployed server (where the upload came from another organisation's machine).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedhet.core.text import quoted


class InvalidUploadError(ValueError):
    """An upload or reply that is not what the server expects of the client; the message names the field."""


#: Training metrics every upload carries: the mean loss of the client's steps and their number.
ENGINE_METRICS = frozenset({"loss", "steps"})


@dataclass(frozen=True)
class TensorSpec:
    """The shape and dtype a tensor of an upload must have.

    Example:
        >>> TensorSpec((3, 2)).mismatch(torch.zeros(3, 2))
        >>> TensorSpec((3, 2)).mismatch(torch.zeros(2, 3))
        'shape (2, 3), expected (3, 2)'

    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    @classmethod
    def of(cls, tensor: Tensor) -> TensorSpec:
        """The spec ``tensor`` meets."""
        return cls(tuple(tensor.shape), tensor.dtype)

    def mismatch(self, tensor: object) -> str | None:
        """Why ``tensor`` does not meet the spec (a phrase), or ``None``."""
        if not isinstance(tensor, Tensor):
            return f"a {type(tensor).__name__}, expected a tensor"
        if tuple(tensor.shape) != self.shape:
            return f"shape {tuple(tensor.shape)}, expected {self.shape}"
        if tensor.dtype != self.dtype:
            return f"dtype {tensor.dtype}, expected {self.dtype}"
        return None


@dataclass(frozen=True)
class UploadDeclaration:
    """What a method uploads besides its shared parameters, for one client.

    Args:
        statistics: every statistic the client uploads after local training, by name (exactly these: none is
            optional, none other is admitted).
        metrics: the names of the training metrics the module logs with ``self.log`` during local training and the
            losses of phases with a ``loss_key`` of their own (``"loss"`` and ``"steps"`` are always there).

    """

    statistics: Mapping[str, TensorSpec] = field(default_factory=dict)
    metrics: frozenset[str] = frozenset({"train/loss"})


def tensors_mismatch(kind: str, tensors: Mapping[str, object], expected: Mapping[str, TensorSpec]) -> str | None:
    """Why ``tensors`` are not exactly the ``expected`` names, shapes and dtypes (naming the field), or ``None``.

    Args:
        kind: what the tensors are, for the message (``"shared parameter"``, ``"statistic"``).
        tensors: the upload's tensors, by name.
        expected: the declared ones.

    Example:
        >>> tensors_mismatch("statistic", {"c": torch.zeros(2)}, {"c": TensorSpec((2,)), "n": TensorSpec((2,))})
        "statistic 'n' is missing"

    """
    missing = [name for name in expected if name not in tensors]
    if missing:
        return f"{kind} {quoted(missing[0])} is missing"
    extra = next((name for name in tensors if name not in expected), None)
    if extra is not None:  # a name from the upload: quoted within a bounded length
        return f"{kind} {quoted(extra)} is not one the method declares"
    for name, spec in expected.items():
        reason = spec.mismatch(tensors[name])
        if reason is not None:
            return f"{kind} '{name}' has {reason}"
    return None


@dataclass(frozen=True)
class ExpectedUpload:
    """What the server admits from one client.

    Its shared parameters as the server builds them, the method's declaration for it, and its number of training
    samples as its description declares it.

    Args:
        shared: the client's shared parameters (names, shapes, dtypes) in the server's build of its architecture.
        declaration: the method's :class:`UploadDeclaration` for the client.
        num_train: the client's declared number of training samples: the largest weight it may claim.

    """

    shared: Mapping[str, TensorSpec]
    declaration: UploadDeclaration
    num_train: int

    def mismatch(
        self,
        shared: Mapping[str, object],
        statistics: Mapping[str, object],
        metrics: Mapping[str, object],
        num_samples: object,
        check_metric_names: bool = True,
        shared_checked: bool = False,
    ) -> str | None:
        """Why an upload is not what the server expects (one phrase naming the field), or ``None``.

        Args:
            shared: the uploaded shared parameters, by name.
            statistics: the uploaded statistics, by name.
            metrics: the training metrics.
            num_samples: the sample count the client claims (its aggregation weight).
            check_metric_names: refuse training metrics the declaration does not name (a deployed server, where each
                name would become a column of the logs); a simulation only checks that the loss is there.
            shared_checked: ``shared`` was checked already, for a whole stack of clients at once
                (:meth:`stack_mismatch`): only the rest of the upload is checked here.

        Example:
            >>> ExpectedUpload({}, UploadDeclaration(), num_train=5).mismatch({}, {}, {"loss": 1.0}, 0)
            "field 'num_samples' is 0, expected an integer in [1, 5]"

        """
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or not 1 <= num_samples <= self.num_train:
            return f"field 'num_samples' is {num_samples!r}, expected an integer in [1, {self.num_train}]"
        if "loss" not in metrics:
            return "training metric 'loss' is missing"
        for name, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"training metric {quoted(name)} is a {type(value).__name__}, expected a number"
            if check_metric_names and name not in ENGINE_METRICS and name not in self.declaration.metrics:
                return f"training metric {quoted(name)} is not one the method logs"
            if check_metric_names and name != "loss" and not math.isfinite(value):  # the loss: a non-finite upload
                return f"training metric {quoted(name)} is {value}, expected a finite number"
        shared_reason = None if shared_checked else tensors_mismatch("shared parameter", shared, self.shared)
        return shared_reason or tensors_mismatch("statistic", statistics, self.declaration.statistics)

    def stack_mismatch(self, stacked: Mapping[str, Tensor]) -> str | None:
        """Why the shared parameters of a stack of clients are not each what :meth:`mismatch` admits, or ``None``.

        Args:
            stacked: each shared parameter of ``K >= 1`` clients stacked along a leading axis, ``(K, *shape)``:
                client ``k``'s parameter is ``stacked[name][k]``, so every client has these names, shapes and dtypes.

        Example:
            >>> ExpectedUpload({"w": TensorSpec((2,))}, UploadDeclaration(), 5).stack_mismatch({"w": torch.zeros(3, 2)})
            >>> ExpectedUpload({"w": TensorSpec((2,))}, UploadDeclaration(), 5).stack_mismatch({"w": torch.zeros(3, 1)})
            "shared parameter 'w' has shape (1,), expected (2,)"

        """
        return tensors_mismatch("shared parameter", {name: t[0] for name, t in stacked.items()}, self.shared)
