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
from pathlib import Path

import pytest

pytest.importorskip("flwr")

import torch  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedhet.callbacks.fedpac import CENTROIDS  # noqa: E402
from fedhet.integrations.flower.apps import make_client_app, serve  # noqa: E402

CLIENTS = ("client_000", "client_001", "client_002")
HOSTILE = 2  # the node of client_002
CONFIG = """
trainer:
  rounds: 2
  seed: 3
  processes:
    accelerator: cpu
  faults:
    max_client_failures: 0.4
  reporting:
    progress_bar: false
  default_root_dir: {root}
model:
  class_path: fedhet.modules.FedPAC
  init_args: {{hidden_dims: [16], lr: 0.1, lambda_align: 1.0}}
data:
  class_path: fedhet.datamodules.DigitsFederation
  init_args: {{num_clients: 3, alpha: 0.5, val_fraction: 0.2, test_fraction: 0.2, seed: 1}}
"""

#: ``attack(message type, reply content) -> new content``, or ``None`` to send no reply at all.
Attack = Callable[[str, RecordDict], "RecordDict | None"]


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
}
EVAL_ATTACKS: dict[str, tuple[Attack, str]] = {
    "eval-count-as-text": (_evaluation(_set_eval_config(num_samples="7")), "num_samples"),
    "eval-negative-count": (_evaluation(_set_eval_config(num_samples=-3)), "num_samples"),
    "eval-count-beyond-split": (_evaluation(_set_eval_config(num_samples=10**6)), "num_samples"),
    "eval-empty": (_evaluation(lambda content: RecordDict()), "no val evaluation"),
    "eval-extra-metric": (_evaluation(_extra_eval_metric), "made_up"),
    "eval-no-config": (_evaluation(lambda c: RecordDict({"metrics": c.metric_records["metrics"]})), "config"),
}


def _metrics_without_loss(kind: str, content: RecordDict) -> RecordDict:
    if kind == "train":
        values = {k: v for k, v in content.metric_records["metrics"].items() if k != "loss"}
        content.metric_records["metrics"] = MetricRecord(values)
    return content


class StandInGrid:
    """Flower's grid as the server sees it, with each node's real ``ClientApp`` behind it and one node hostile."""

    def __init__(self, config: Path, attack: Attack | None = None, describe: Callable | None = None) -> None:
        self.app = make_client_app(config)
        self.attack = attack
        self.describe = describe
        self.states = {node: RecordDict() for node in range(len(CLIENTS))}

    def get_node_ids(self) -> list[int]:
        return list(self.states)

    def send_and_receive(self, messages, timeout=None):
        for message in messages:
            node = message.metadata.dst_node_id
            context = Context(
                run_id=1,
                node_id=node,
                node_config={"client-id": CLIENTS[node]},
                state=self.states[node],
                run_config={},
            )
            reply = self.app(message, context)
            if node != HOSTILE:
                yield reply
                continue
            kind = message.metadata.message_type
            if kind == "query" and self.describe is not None:
                yield Message(self.describe(reply.content), reply_to=message)
            elif kind != "query" and self.attack is not None:
                content = self.attack(kind, reply.content)
                if content is not None:
                    yield Message(content, reply_to=message)
            else:
                yield reply


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    """The server process's Flower identity, which ``Message`` reads when the server builds one."""
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def run(tmp_path: Path, name: str, **grid) -> tuple:
    config = tmp_path / f"{name}.yaml"
    config.write_text(CONFIG.format(root=tmp_path / name))
    trainer = serve(config, StandInGrid(config, **grid), {"wait-s": 5, "max-message-mb": 1})
    return trainer.history, trainer.server_state


def comparable(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith("time/") and not k.endswith("seconds")} for m in history]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The run in which the hostile node answers every training message with an error."""
    tmp = tmp_path_factory.mktemp("reference")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
            patch.setattr(TaskIdentity, name, value)
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
    assert all(field in line for line in lines), lines
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


def _spec_field(**fields) -> Callable[[RecordDict], RecordDict]:
    import json

    def change(content: RecordDict) -> RecordDict:
        spec = {**json.loads(content.config_records["config"]["spec"]), **fields}
        return RecordDict({"config": ConfigRecord({"spec": json.dumps(spec)})})

    return change


@pytest.mark.parametrize(
    ("describe", "field"),
    [
        (_spec_field(input_shape=[10**9]), "input_shape"),
        (_spec_field(num_train=-1), "num_train"),
        (_spec_field(classes=[0, 99]), "classes"),
        (lambda content: RecordDict({"config": ConfigRecord({"spec": "{not json"})}), "spec"),
        (_spec_field(client_id=CLIENTS[0]), "claims client 'client_000'"),
    ],
    ids=["huge-input", "negative-count", "class-out-of-range", "not-json", "claims-another-client"],
)
def test_a_bad_description_costs_the_node_its_seat_only(tmp_path, caplog, describe, field):
    config = tmp_path / "federation.yaml"
    config.write_text(CONFIG.format(root=tmp_path / "run"))
    with caplog.at_level(logging.WARNING), pytest.raises(TimeoutError, match="of 3 Flower clients described") as err:
        serve(config, StandInGrid(config, describe=describe), {"wait-s": 1})
    assert field in str(err.value)
    assert any(field in r.getMessage() for r in caplog.records)
    # with two seats to fill, the honest nodes' run goes on (a claimed client loses both claimants)
    seats = 1 if "claims" in field else 2
    serve(config, StandInGrid(config, describe=describe), {"wait-s": 1, "num-clients": seats})
