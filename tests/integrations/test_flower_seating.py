"""Seating a deployed federation: a node's description costs that node its seat, never the run, within the budget.

The server is fedhet's own (``serve``), the transport the stand-in grid of ``flower_standin`` whose node 2 rewrites
its description. A description refused on its own (a field out of range) or against the others' (a ``num_classes`` or
a shared parameter's shape other than most clients give) unseats its node, named in the log, and the run goes on with
the two other clients; only the failure budget (``trainer.faults.max_client_failures``, 0.4 here) stops it.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, RecordDict  # noqa: E402

from fedhet.core import ClientSpec, InvalidUploadError  # noqa: E402
from fedhet.integrations.flower.apps import make_server_app  # noqa: E402
from fedhet.integrations.flower.engine import load_run  # noqa: E402
from fedhet.integrations.flower.seating import disagreeing, shared_shapes  # noqa: E402
from fedhet.modules import FedAvg  # noqa: E402
from tests.integrations.flower_standin import CLIENTS, HOSTILE, run, server_identity  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    server_identity(monkeypatch)


def spec_field(**fields) -> Callable[[RecordDict], RecordDict]:
    """A node's description with ``fields`` changed."""

    def change(content: RecordDict) -> RecordDict:
        spec = {**json.loads(content.config_records["config"]["spec"]), **fields}
        return RecordDict({"config": ConfigRecord({"spec": json.dumps(spec)})})

    return change


def refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if f"Flower node {HOSTILE} refused" in r.getMessage()]


#: ``(description change, run config, method, what the refusal says)``
DESCRIPTIONS = {
    "huge-input": (spec_field(input_shape=[10**9]), {}, "FedPAC", "input_shape"),
    "negative-count": (spec_field(num_train=-1), {}, "FedPAC", "num_train"),
    "out-of-range": (spec_field(classes=[0, 99]), {}, "FedPAC", "classes"),
    "not-json": (lambda content: RecordDict({"config": ConfigRecord({"spec": "{not json"})}), {}, "FedPAC", "spec"),
    # the server's config fixes 10 classes (DigitsFederation): max-classes defaults to 10
    "11-classes": (spec_field(num_classes=11), {}, "FedAvg", "field 'num_classes' is 11, outside [1, 10]"),
    # admitted on its own, refused against the others (at 9390786: FedAvg's shared head.weight (11, 16) ended the run)
    "11-of-10-classes": (
        spec_field(num_classes=11),
        {"max-classes": 1000},
        "FedAvg",
        "field 'num_classes' is 11, where 2 of 3 clients give 10",
    ),
    # 128 features where two clients have 64: FedPAC's shared body has another input width
    "128-of-64-features": (
        spec_field(input_shape=[128]),
        {"max-input-features": 10**7},
        "FedPAC",
        "(16, 128), where 2 of 3 clients give (16, 64)",
    ),
}


@pytest.mark.parametrize("case", list(DESCRIPTIONS))
def test_a_bad_description_costs_its_node_the_seat_and_the_run_goes_on(tmp_path, caplog, case):
    describe, run_config, model, field = DESCRIPTIONS[case]
    with caplog.at_level(logging.WARNING):
        history, server = run(tmp_path, "run", run_config, model, describe=describe)
    assert [m["clients/participants"] for m in history] == [2.0, 2.0]
    assert [m["clients/failed"] for m in history] == [0.0, 0.0]
    assert all(f"val/acc/{CLIENTS[HOSTILE]}" not in m for m in history)
    lines = refusals(caplog)
    assert len(lines) == 1
    assert field in lines[0], lines


def test_two_claimants_of_one_client_both_lose_it_and_the_budget_decides(tmp_path, caplog):
    claim = spec_field(client_id=CLIENTS[0])  # node 2 claims node 0's client: 2 of 3 nodes refused, over 0.4
    with pytest.raises(RuntimeError, match=r"2 of 3 Flower nodes refused, more than max_client_failures=0.4") as err:
        run(tmp_path, "refused", describe=claim)
    assert "claims client 'client_000'" in str(err.value)
    history, _ = run(tmp_path, "allowed", {"fedhet-args": "--trainer.faults.max_client_failures 0.7"}, describe=claim)
    assert [m["clients/participants"] for m in history] == [1.0, 1.0]  # client_001 alone


def test_too_few_nodes_within_wait_s_is_one_line_naming_them(tmp_path):
    with pytest.raises(TimeoutError, match=r"3 of 4 Flower nodes answered within wait-s=1"):
        run(tmp_path, "few", {"num-clients": 4, "wait-s": 1})


def test_a_module_over_max_model_mb_is_refused_from_its_meta_build():
    template = FedAvg(hidden_dims=[16])
    assert shared_shapes(template, ClientSpec("a", (64,), num_classes=10), 2**20)["head.weight"] == (10, 16)
    huge = ClientSpec("a", (10_000_000,), num_classes=10)  # a 16 x 10^7 first layer: 610 MiB, never allocated
    with pytest.raises(InvalidUploadError, match=r"its module would take 610 MiB, over the limit of 512 MiB"):
        shared_shapes(template, huge, 512 * 2**20)


def test_disagreeing_names_each_client_against_the_value_most_give():
    shapes = {"a": {"n": 10, "w": (4, 2)}, "b": {"n": 10, "w": (4, 2)}, "c": {"n": 10, "w": (5, 2)}, "d": {"v": 1}}
    assert disagreeing(shapes) == {"c": "w is (5, 2), where 2 of 3 clients give (4, 2)"}
    tied = disagreeing({"a": {"n": 10}, "b": {"n": 11}})
    assert set(tied) == {"a", "b"}
    assert "no value has most clients (10: 1, 11: 1)" in tied["a"]


MEASURE = """
import json, resource, sys
from pathlib import Path
import pytest
from tests.integrations.flower_standin import run, server_identity
from tests.integrations.test_flower_seating import spec_field

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

server_identity(pytest.MonkeyPatch())
tmp = Path(sys.argv[1])
run(tmp, "honest")  # every import and the honest run's own peak first
honest = peak_mib()
history, _ = run(tmp, "huge", {"max-input-features": 10**7}, describe=spec_field(input_shape=[10_000_000]))
print(json.dumps({"honest": honest, "huge": peak_mib(), "participants": [m["clients/participants"] for m in history]}))
"""


def test_a_ten_million_feature_description_is_refused_without_allocating_it(tmp_path):
    """At 9390786 the server built the node's FedPAC body (16 x 10^7 floats and more): 2.9 GB peak before failing."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["participants"] == [2.0, 2.0]
    assert measured["huge"] - measured["honest"] < 256, measured  # MiB of peak resident memory the seating added


def test_a_refused_config_is_one_line_naming_the_option_in_the_servers_log(tmp_path, caplog):
    """At 9390786 the parser exited the process (``SystemExit``): Flower's run ended with no line in its stream."""
    config = tmp_path / "federation.yaml"
    config.write_text("trainer:\n  accelerator: cpu\nmodel:\n  class_path: fedhet.modules.FedAvg\n")
    with pytest.raises(ValueError, match=r"federation.yaml'.*accelerator") as err:
        load_run(config)
    assert "\n" not in str(err.value)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
    with caplog.at_level(logging.ERROR), pytest.raises(ValueError, match="accelerator"):
        make_server_app(config)(grid=None, context=context)
    (line,) = [r.getMessage() for r in caplog.records if r.name.startswith("fedhet")]
    assert line.startswith("fedhet ServerApp failed: ValueError: config ")
    assert "accelerator" in line
