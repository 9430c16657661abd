"""What a fedhet federation sends over Flower, as Flower records (``RecordDict``), and back.

Tensors travel as ``ArrayRecord`` s (name-keyed, dtype and shape kept, bit for bit), scalars as ``MetricRecord`` s and
``ConfigRecord`` s; no pickle crosses the network. A client's own state (personal tensors, kept optimizer state) is
saved in its node's ``Context.state`` with ``torch.save`` and read back with ``weights_only=True``.

What a node sends the server is untrusted: the server's decoders (:func:`decode_update`, :func:`decode_evaluation`,
:func:`decode_spec`) check every record and field they read (its presence, type and range, the bytes of its tensors
before any is built) and raise :class:`~fedhet.core.InvalidUploadError` naming the field; what the values mean for
the federation (which client, which names and shapes) is checked by the server's runner
(:class:`~fedhet.integrations.flower.engine.RemoteRunner`).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from torch import Tensor

from fedhet.core import (
    FAILURE_KINDS,
    ClientFailure,
    ClientSpec,
    ClientState,
    ClientUpdate,
    InvalidUploadError,
    SpecLimits,
    quoted,
)
from fedhet.plugins.clients.context import ClientEvaluation

_PAYLOAD, _STATISTICS, _SHARED, _METRICS, _CONFIG = "payload", "statistics", "shared", "metrics", "config"
_FAILURE = "failure"
_CLIENT_STATE = "fedhet.client_state"
_REASON_CHARS = 500  # of a node's failure reason, kept for the log


def _record(records: Mapping[str, Any], name: str, what: str) -> Any:
    if name not in records:
        raise InvalidUploadError(f"{what} record '{name}' is missing")
    return records[name]


def _field(config: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``config[name]`` if it is of type ``kind`` (a bool is no number here)."""
    if name not in config:
        raise InvalidUploadError(f"field '{name}' is missing")
    value = config[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidUploadError(f"field '{name}' is a {type(value).__name__}")
    return value


def _numbers(record: Mapping[str, Any]) -> dict[str, float]:
    """The scalar metrics of a ``MetricRecord`` (lists of values are refused)."""
    values = {}
    for name, value in record.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidUploadError(f"metric {quoted(name)} is a {type(value).__name__}, expected a number")
        values[name] = float(value)
    return values


def reply_bytes(content: RecordDict) -> int:
    """Bytes of the tensor data a message carries (as serialised), counted before any tensor is built."""
    return sum(len(array.data) for record in content.array_records.values() for array in record.values())


def _checked_tensors(content: RecordDict, name: str, max_bytes: int) -> dict[str, Tensor]:
    size = reply_bytes(content)
    if size > max_bytes:
        raise InvalidUploadError(
            f"the reply carries {size} bytes of tensors, over the limit of {max_bytes} (max-message-mb)"
        )
    return _tensors(_record(content.array_records, name, "array"))


def _arrays(tensors: Mapping[str, Tensor]) -> ArrayRecord:
    return ArrayRecord({name: t.detach().cpu().contiguous() for name, t in tensors.items()})


def _tensors(record: ArrayRecord) -> dict[str, Tensor]:
    return record.to_torch_state_dict() if len(record) else {}


def encode_request(
    round_idx: int, payload: Mapping[str, Tensor], statistics: Mapping[str, Tensor], stage: str = "fit"
) -> RecordDict:
    """A server-to-client message: the round, the client's payload and the broadcast statistics.

    Args:
        round_idx: the round (of training, or the round after which an evaluation runs).
        payload: the parameters the client loads (its shared ones, then its personalised ones), by name.
        statistics: the statistics broadcast to every client (e.g. global centroids, anchors), by name.
        stage: ``"fit"``, or the split to evaluate (``"val"``, ``"test"``).

    """
    return RecordDict(
        {
            _PAYLOAD: _arrays(payload),
            _STATISTICS: _arrays(statistics),
            _CONFIG: ConfigRecord({"round": round_idx, "stage": stage}),
        }
    )


def decode_request(content: RecordDict) -> tuple[int, dict[str, Tensor], dict[str, Tensor], str]:
    """``(round, payload, statistics, stage)`` of :func:`encode_request`."""
    config = content.config_records[_CONFIG]
    payload, statistics = _tensors(content.array_records[_PAYLOAD]), _tensors(content.array_records[_STATISTICS])
    return int(config["round"]), payload, statistics, str(config["stage"])  # type: ignore[arg-type]


def encode_update(update: ClientUpdate, seconds: float) -> RecordDict:
    """A client's upload: exactly its shared parameters and declared statistics, its sample count and diagnostics.

    Args:
        update: what the engine's local loop produced for the client.
        seconds: wall time of the client's local work (loading, training, building the upload).

    """
    return RecordDict(
        {
            _SHARED: _arrays(update.shared),
            _STATISTICS: _arrays(update.statistics),
            _METRICS: MetricRecord(dict(update.metrics)),
            _CONFIG: ConfigRecord(
                {"client_id": update.client_id, "num_samples": update.num_samples, "seconds": seconds}
            ),
        }
    )


def encode_failure(failure: ClientFailure) -> RecordDict:
    """A client whose training raised or whose upload failed a check on its node: why, instead of an upload."""
    return RecordDict(
        {_FAILURE: ConfigRecord({"client_id": failure.client_id, "kind": failure.kind, "reason": failure.reason})}
    )


def decode_update(content: RecordDict, max_bytes: int = 2**62) -> tuple[ClientUpdate, float] | ClientFailure:
    """``(update, seconds)`` of :func:`encode_update`, or the failure of :func:`encode_failure`.

    Args:
        content: the reply.
        max_bytes: the most bytes of tensor data the reply may carry.

    Raises:
        InvalidUploadError: naming the record or field that is missing, of a wrong type or out of range.

    """
    if _FAILURE in content.config_records:
        failure = content.config_records[_FAILURE]
        kind = _field(failure, "kind", str)
        if kind not in FAILURE_KINDS:
            raise InvalidUploadError(f"field 'kind' is {quoted(kind)}, not one of {FAILURE_KINDS}")
        reason = _field(failure, "reason", str)[:_REASON_CHARS]
        return ClientFailure(_field(failure, "client_id", str), kind, reason)
    config = _record(content.config_records, _CONFIG, "config")
    seconds = float(_field(config, "seconds", (int, float)))
    if not 0 <= seconds < math.inf:
        raise InvalidUploadError(f"field 'seconds' is {seconds}, expected a duration")
    update = ClientUpdate(
        client_id=_field(config, "client_id", str),
        num_samples=_field(config, "num_samples", int),
        shared=_checked_tensors(content, _SHARED, max_bytes),
        statistics=_checked_tensors(content, _STATISTICS, max_bytes),
        metrics=_numbers(_record(content.metric_records, _METRICS, "metric")),
    )
    return update, seconds


def encode_evaluation(evaluation: ClientEvaluation | None) -> RecordDict:
    """A client's evaluation on one split (its metrics, number of samples, metric directions), or none: no split."""
    if evaluation is None:
        return RecordDict()
    directions = json.dumps(dict(evaluation.higher_is_better))
    return RecordDict(
        {
            _METRICS: MetricRecord(dict(evaluation.metrics)),
            _CONFIG: ConfigRecord({"num_samples": evaluation.num_samples, "directions": directions}),
        }
    )


def decode_evaluation(content: RecordDict) -> ClientEvaluation | None:
    """The evaluation of :func:`encode_evaluation`: its metrics and sample count.

    The metrics' directions are the server's own: what a node says of them is not read.

    Raises:
        InvalidUploadError: naming the record or field that is missing or of a wrong type.

    """
    if not len(content):
        return None
    values = _numbers(_record(content.metric_records, _METRICS, "metric"))
    num_samples = _field(_record(content.config_records, _CONFIG, "config"), "num_samples", int)
    return ClientEvaluation(values, num_samples, {})


def encode_spec(spec: ClientSpec) -> RecordDict:
    """A client's description (feature shape, classes, sample counts, feature blocks), as JSON."""
    return RecordDict({_CONFIG: ConfigRecord({"spec": json.dumps(spec.to_dict())})})


def decode_spec(content: RecordDict, source: str = "Flower node", limits: SpecLimits | None = None) -> ClientSpec:
    """The :class:`~fedhet.core.ClientSpec` of :func:`encode_spec`, each field checked (:meth:`ClientSpec.parse`).

    Args:
        content: the node's reply to the ``query`` message.
        source: who sent it, for the error.
        limits: the bounds of the description's sizes and counts.

    Raises:
        InvalidUploadError: naming ``source`` and the field that is missing, of a wrong type or out of range.

    """
    try:
        text = _field(_record(content.config_records, _CONFIG, "config"), "spec", str)
        try:
            fields = json.loads(text)
        except (ValueError, RecursionError) as err:
            raise InvalidUploadError(f"field 'spec' is not a JSON description: {err}") from err
        return ClientSpec.parse(fields, source, limits)
    except ValueError as err:
        raise InvalidUploadError(str(err) if str(err).startswith(source) else f"{source}: {err}") from err


def save_client_state(state: RecordDict, client_state: ClientState) -> None:
    """Keep a client's state in its node's ``Context.state`` (it never leaves the node)."""
    buffer = io.BytesIO()
    torch.save(client_state.state_dict(), buffer)
    state[_CLIENT_STATE] = ConfigRecord({"state": buffer.getvalue()})


def load_client_state(state: RecordDict) -> ClientState | None:
    """The state :func:`save_client_state` kept, or ``None`` before the client's first round."""
    if _CLIENT_STATE not in state.config_records:
        return None
    data = state.config_records[_CLIENT_STATE]["state"]
    assert isinstance(data, bytes)
    return ClientState.from_state_dict(torch.load(io.BytesIO(data), weights_only=True))
