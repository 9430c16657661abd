"""What a fedhet federation sends over Flower, as Flower records (``RecordDict``), and back.

Tensors travel as ``ArrayRecord`` s (name-keyed, dtype and shape kept, bit for bit), scalars as ``MetricRecord`` s and
``ConfigRecord`` s; no pickle crosses the network. A client's own state (personal tensors, kept optimizer state) is
saved in its node's ``Context.state`` with ``torch.save`` and read back with ``weights_only=True``.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Mapping
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from torch import Tensor

from fedhet.core import ClientFailure, ClientSpec, ClientState, ClientUpdate
from fedhet.plugins.context import ClientEvaluation

_PAYLOAD, _STATISTICS, _SHARED, _METRICS, _CONFIG = "payload", "statistics", "shared", "metrics", "config"
_FAILURE = "failure"
_CLIENT_STATE = "fedhet.client_state"


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


def decode_update(content: RecordDict) -> tuple[ClientUpdate, float] | ClientFailure:
    """``(update, seconds)`` of :func:`encode_update`, or the failure of :func:`encode_failure`."""
    if _FAILURE in content.config_records:
        failure = content.config_records[_FAILURE]
        kind = str(failure["kind"])
        if kind not in ("error", "non_finite", "straggler"):
            raise ValueError(f"Flower reply: unknown failure kind {kind!r}")
        return ClientFailure(str(failure["client_id"]), kind, str(failure["reason"]))  # type: ignore[arg-type]
    config = content.config_records[_CONFIG]
    update = ClientUpdate(
        client_id=str(config["client_id"]),
        num_samples=int(config["num_samples"]),  # type: ignore[arg-type]
        shared=_tensors(content.array_records[_SHARED]),
        statistics=_tensors(content.array_records[_STATISTICS]),
        metrics={name: float(value) for name, value in content.metric_records[_METRICS].items()},  # type: ignore[arg-type]
    )
    return update, float(config["seconds"])  # type: ignore[arg-type]


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
    """The evaluation of :func:`encode_evaluation`."""
    if _METRICS not in content.metric_records:
        return None
    config = content.config_records[_CONFIG]
    values = {name: float(value) for name, value in content.metric_records[_METRICS].items()}  # type: ignore[arg-type]
    return ClientEvaluation(values, int(config["num_samples"]), json.loads(str(config["directions"])))  # type: ignore[arg-type]


def encode_spec(spec: ClientSpec) -> RecordDict:
    """A client's description (feature shape, classes, sample counts, feature blocks), as JSON."""
    return RecordDict({_CONFIG: ConfigRecord({"spec": json.dumps(dataclasses.asdict(spec))})})


def decode_spec(content: RecordDict) -> ClientSpec:
    """The :class:`~fedhet.core.ClientSpec` of :func:`encode_spec`."""
    fields: dict[str, Any] = json.loads(str(content.config_records[_CONFIG]["spec"]))
    fields["input_shape"] = tuple(fields["input_shape"])
    fields["classes"] = tuple(fields["classes"])
    return ClientSpec(**fields)


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
