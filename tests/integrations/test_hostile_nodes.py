"""A Flower federation among nodes we do not trust: every class of bad reply fails its client, never the server.

The server is fedhet's own (``serve``: its node seating, per-client reply decoding and checks, the engine's round); the
transport is a stand-in for Flower's grid that hands each message to the real ``ClientApp`` of the node it is sent to,
then lets one hostile node rewrite its reply. Each attack's run must finish with the hostile client counted as failed
in the round's ``clients/failed`` (training) or ``clients/val_failed`` (evaluation), a log line naming the client and
the field, and a server state equal to the one of a run where that node only ever answers with an error: nothing of
its reply reaches the server state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

pytest.importorskip("flwr")

import torch  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Error, MetricRecord, RecordDict  # noqa: E402

from fedhet.callbacks.fedpac import CENTROIDS  # noqa: E402
from tests.integrations.flower_standin import CLIENTS, HOSTILE, Attack, run, server_identity  # noqa: E402


def _edit_config(**fields) -> Attack:
    def attack(kind: str, content: RecordDict) -> RecordDict:
        if kind == "train":
            content.config_records["config"] = ConfigRecord({**content.config_records["config"], **fields})
        return content

    return attack


def _edit_arrays(record: str, change: Callable[[dict], None]) -> Attack:
    def attack(kind: str, content: RecordDict) -> RecordDict:
        if kind == "train":
            tensors = content.array_records[record].to_torch_state_dict()
            change(tensors)
            content.array_records[record] = ArrayRecord(tensors)
        return content

    return attack


def _drop(record_kind: str, name: str, on: str = "train") -> Attack:
    def attack(kind: str, content: RecordDict) -> RecordDict:
        if kind == on:
            del getattr(content, record_kind)[name]
        return content

    return attack


def _failure(**fields) -> Attack:
    def attack(kind: str, content: RecordDict) -> RecordDict:
        if kind != "train":
            return content
        failure = {"client_id": CLIENTS[HOSTILE], "kind": "error", "reason": "x", **fields}
        return RecordDict({"failure": ConfigRecord(failure)})

    return attack


def _metrics(**values) -> Attack:
    def attack(kind: str, content: RecordDict) -> RecordDict:
        if kind == "train":
            content.metric_records["metrics"] = MetricRecord({**content.metric_records["metrics"], **values})
        return content

    return attack


def _evaluation(change: Callable[[RecordDict], RecordDict]) -> Attack:
    return lambda kind, content: change(content) if kind == "evaluate" else content


def _set_eval_config(**fields) -> Callable[[RecordDict], RecordDict]:
    def change(content: RecordDict) -> RecordDict:
        content.config_records["config"] = ConfigRecord({**content.config_records["config"], **fields})
        return content

    return change


def _set_eval_metrics(**values) -> Callable[[RecordDict], RecordDict]:
    def change(content: RecordDict) -> RecordDict:
        content.metric_records["metrics"] = MetricRecord({**content.metric_records["metrics"], **values})
        return content

    return change


def _extra_eval_metric(content: RecordDict) -> RecordDict:
    content.metric_records["metrics"] = MetricRecord({**content.metric_records["metrics"], "made_up": 1.0})
    return content


#: Each attack and the field its log line names; ``"val"`` attacks hit the evaluation replies.
TRAIN_ATTACKS: dict[str, tuple[Attack, str]] = {
    "wrong-shape": (_edit_arrays("shared", lambda t: t.update({k: v[:1] for k, v in list(t.items())[:1]})), "shape"),
    "wrong-dtype": (_edit_arrays("shared", lambda t: t.update({k: v.double() for k, v in t.items()})), "dtype"),
    "extra-tensor": (_edit_arrays("shared", lambda t: t.update({"evil": torch.zeros(10)})), "'evil'"),
    "missing-tensor": (_edit_arrays("shared", lambda t: t.pop(next(iter(t)))), "missing"),
    "statistic-shape": (_edit_arrays("statistics", lambda t: t.update({CENTROIDS: torch.zeros(3, 3)})), CENTROIDS),
    "extra-statistic": (_edit_arrays("statistics", lambda t: t.update({"fedpac/evil": torch.zeros(1)})), "evil"),
    "zero-samples": (_edit_config(num_samples=0), "num_samples"),
    "negative-samples": (_edit_config(num_samples=-5), "num_samples"),
    "huge-samples": (_edit_config(num_samples=10**15), "num_samples"),
    "samples-as-text": (_edit_config(num_samples="100"), "num_samples"),
    "seconds-negative": (_edit_config(seconds=-1.0), "seconds"),
    "spoofed-client": (_edit_config(client_id=CLIENTS[0]), "client_id"),
    "no-config": (_drop("config_records", "config"), "config"),
    "no-loss": (_drop("metric_records", "metrics"), "metrics"),
    "loss-missing": (lambda kind, c: _metrics_without_loss(kind, c), "'loss'"),
    "extra-metric": (_metrics(**{"made/up": 1.0}), "made/up"),
    "metric-list": (_metrics(loss=[1.0, 2.0]), "loss"),
    "unknown-failure-kind": (_failure(kind="meltdown"), "kind"),
    "failure-for-another": (_failure(client_id=CLIENTS[0]), CLIENTS[0]),
    "node-error": (lambda kind, c: Error(code=1, reason="crashed") if kind == "train" else c, "crashed"),
    "silent": (lambda kind, c: None if kind == "train" else c, "no reply"),
    "too-big": (_edit_arrays("shared", lambda t: t.update({"evil": torch.zeros(300_000)})), "max-message-mb"),
    "huge-client-id": (_edit_config(client_id="x" * 20_000_000), "client_id"),  # quoted within a bounded length
    "huge-tensor-name": (_edit_arrays("shared", lambda t: t.update({"e" * 1_000_000: torch.zeros(1)})), "declares"),
    "metric-inf": (_metrics(**{"train/loss": float("inf")}), "train/loss"),
}
EVAL_ATTACKS: dict[str, tuple[Attack, str]] = {
    "eval-count-as-text": (_evaluation(_set_eval_config(num_samples="7")), "num_samples"),
    "eval-negative-count": (_evaluation(_set_eval_config(num_samples=-3)), "num_samples"),
    "eval-count-beyond-split": (_evaluation(_set_eval_config(num_samples=10**6)), "num_samples"),
    "eval-empty": (_evaluation(lambda content: RecordDict()), "no val evaluation"),
    "eval-extra-metric": (_evaluation(_extra_eval_metric), "made_up"),
    "eval-no-config": (_evaluation(lambda c: RecordDict({"metrics": c.metric_records["metrics"]})), "config"),
    "eval-acc-inf": (_evaluation(_set_eval_metrics(acc=float("inf"))), "'acc' is inf"),
    "eval-acc-minus-inf": (_evaluation(_set_eval_metrics(acc=float("-inf"))), "'acc' is -inf"),
    "eval-acc-1e308": (_evaluation(_set_eval_metrics(acc=1e308)), "'acc' is 1e+308"),
    "eval-acc-above-one": (_evaluation(_set_eval_metrics(acc=1.5)), "'acc' is 1.5"),
    "eval-acc-negative": (_evaluation(_set_eval_metrics(acc=-0.1)), "'acc' is -0.1"),
    "eval-loss-inf": (_evaluation(_set_eval_metrics(loss=float("inf"))), "'loss' is inf"),
}


def _metrics_without_loss(kind: str, content: RecordDict) -> RecordDict:
    if kind == "train":
        values = {k: v for k, v in content.metric_records["metrics"].items() if k != "loss"}
        content.metric_records["metrics"] = MetricRecord(values)
    return content


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    server_identity(monkeypatch)


def comparable(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith("time/") and not k.endswith("seconds")} for m in history]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run in which the hostile node answers every training message with an error."""
    tmp = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        server_identity(patch)
        return run(tmp, "reference", attack=lambda kind, c: Error(code=1, reason="down") if kind == "train" else c)


@pytest.mark.parametrize("attack", list(TRAIN_ATTACKS), ids=list(TRAIN_ATTACKS))
def test_a_bad_training_reply_fails_its_client_and_leaves_no_trace(tmp_path, caplog, reference, attack):
    change, field = TRAIN_ATTACKS[attack]
    with caplog.at_level(logging.WARNING):
        history, server = run(tmp_path, attack, attack=change)
    assert [m["clients/failed"] for m in history] == [1.0, 1.0]
    assert [m["clients/participants"] for m in history] == [2.0, 2.0]
    lines = [r.getMessage() for r in caplog.records if f"client '{CLIENTS[HOSTILE]}'" in r.getMessage()]
    assert lines
    assert all(field in line for line in lines), [line[:1000] for line in lines]
    assert max(len(r.getMessage()) for r in caplog.records) < 2_000  # a crafted value is quoted cut short
    expected_history, expected_server = reference
    drop = {"clients/failed", "clients/stragglers"}  # a silent node is a straggler; the rest is the reference's
    assert [{k: v for k, v in m.items() if k not in drop} for m in comparable(history)] == [
        {k: v for k, v in m.items() if k not in drop} for m in comparable(expected_history)
    ]
    torch.testing.assert_close(server.shared, expected_server.shared, rtol=0, atol=0)
    torch.testing.assert_close(server.statistics, expected_server.statistics, rtol=0, atol=0)
    assert set(server.per_client) <= set(CLIENTS)


@pytest.mark.parametrize("attack", list(EVAL_ATTACKS), ids=list(EVAL_ATTACKS))
def test_a_bad_evaluation_reply_fails_its_client_in_the_summaries(tmp_path, caplog, attack):
    change, field = EVAL_ATTACKS[attack]
    with caplog.at_level(logging.WARNING):
        history, _ = run(tmp_path, attack, attack=change)
    assert [m["clients/val_failed"] for m in history] == [1.0, 1.0]
    assert [m["clients/failed"] for m in history] == [0.0, 0.0]
    for metrics in history:
        honest = [metrics[f"val/acc/{cid}"] for cid in CLIENTS[:HOSTILE]]
        assert f"val/acc/{CLIENTS[HOSTILE]}" not in metrics
        assert metrics["val/acc_mean"] == pytest.approx(sum(honest) / len(honest))
        assert set(metrics) <= {k for k in metrics if "made_up" not in k}
    lines = [r.getMessage() for r in caplog.records if f"client '{CLIENTS[HOSTILE]}'" in r.getMessage()]
    assert lines
    assert all(field in line for line in lines), lines
