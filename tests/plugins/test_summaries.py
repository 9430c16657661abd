"""Client summaries: the same float32 numbers as torchmetrics' Mean/Min/Max metrics fed one client at a time."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.aggregation import MaxMetric, MeanMetric, MinMetric

from fedhet.plugins.rounds.summaries import summarize_clients


def torchmetrics_summaries(per_client, num_samples, higher_is_better, prefix):
    """The reference: torchmetrics aggregation metrics updated client by client, in sorted order."""
    out = {}
    for name in sorted({n for metrics in per_client.values() for n in metrics}):
        mean, weighted = MeanMetric(sync_on_compute=False), MeanMetric(sync_on_compute=False)
        worst = (MinMetric if higher_is_better.get(name, False) else MaxMetric)(sync_on_compute=False)
        for client_id in sorted(per_client):
            if name in per_client[client_id]:
                value = per_client[client_id][name]
                mean.update(value)
                weighted.update(value, weight=num_samples[client_id])
                worst.update(value)
        out[f"{prefix}/{name}_mean"] = mean.compute().item()
        out[f"{prefix}/{name}_weighted"] = weighted.compute().item()
        out[f"{prefix}/{name}_worst"] = worst.compute().item()
    return out


values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=32, min_value=-1e6, max_value=1e6),
    st.sampled_from([0.0, 1.0, 1 / 3, 0.1, 2.5e-8]),
)
clients = st.dictionaries(
    st.text("abcdef", min_size=1, max_size=3),
    st.tuples(st.dictionaries(st.sampled_from(["acc", "loss", "auroc"]), values, min_size=1), st.integers(1, 5000)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(clients=clients, acc_higher=st.booleans())
def test_summaries_equal_torchmetrics_bit_for_bit(clients, acc_higher):
    per_client = {cid: metrics for cid, (metrics, _) in clients.items()}
    num_samples = {cid: n for cid, (_, n) in clients.items()}
    directions = {"acc": acc_higher, "auroc": True}
    out = summarize_clients(per_client, num_samples, directions, "val", log_per_client=False)
    assert out == torchmetrics_summaries(per_client, num_samples, directions, "val")


@pytest.mark.filterwarnings("ignore:.*nan.*")
@pytest.mark.filterwarnings("ignore:.*compute.*before.*update.*")
def test_nan_values_are_left_out_as_torchmetrics_does(caplog):
    per_client = {"a": {"acc": 0.5, "loss": math.nan}, "b": {"acc": math.nan, "loss": math.nan}, "c": {"acc": 0.25}}
    num_samples = {"a": 3, "b": 1, "c": 2}
    out = summarize_clients(per_client, num_samples, {"acc": True}, "val")
    reference = torchmetrics_summaries(per_client, num_samples, {"acc": True}, "val")
    assert out["val/acc_mean"] == reference["val/acc_mean"] == 0.375
    assert out["val/acc_worst"] == reference["val/acc_worst"] == 0.25
    assert math.isnan(out["val/loss_mean"])
    assert math.isnan(reference["val/loss_mean"])
    assert out["val/loss_worst"] == reference["val/loss_worst"] == -math.inf
    assert math.isnan(out["val/loss/a"])
    assert "clients ['b']" in caplog.text
    assert "clients ['a', 'b']" in caplog.text
