"""Property-based tests (hypothesis) of the data validation: random clients, each either valid or spoiled in one
known way. A valid client works end to end; a spoiled one raises ``ValueError``/``TypeError`` naming the client and
the field at fault, and nothing else ever escapes (no ``IndexError``, ``RuntimeError``...)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedhet.datamodules import ClientDataModule, FederatedDataModule

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIELD = re.compile(r"client '([^']*)': field '([^']+)'")

feature_shapes = st.one_of(
    st.tuples(st.integers(1, 6)),  # tabular
    st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3)),  # images
)
float_dtypes = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16])
int_dtypes = st.sampled_from([torch.int64, torch.int32, torch.int16, torch.uint8])


@st.composite
def valid_client(draw, client_id=None):
    """Arguments of a valid client: random size (single-sample included), shape, dtypes, classes (some empty)."""
    num_classes = draw(st.integers(1, 6))
    shape = draw(feature_shapes)
    n = draw(st.integers(1, 12))
    present = draw(st.lists(st.integers(0, num_classes - 1), min_size=1, max_size=num_classes, unique=True))
    y = torch.tensor(draw(st.lists(st.sampled_from(present), min_size=n, max_size=n)), dtype=draw(int_dtypes))
    x = torch.randn(n, *shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 99)))).to(draw(float_dtypes))
    kwargs = {"client_id": client_id or draw(st.text("abcxyz_0123", min_size=1, max_size=6)), "x": x, "y": y}
    kwargs["num_classes"] = num_classes
    held_out = draw(st.sampled_from(["none", "fractions", "tensors"]))
    if held_out == "fractions":
        kwargs["val_fraction"] = draw(st.sampled_from([0.0, 0.1, 0.25]))
        kwargs["test_fraction"] = draw(st.sampled_from([0.0, 0.2, 0.3]))
    elif held_out == "tensors":
        m = draw(st.integers(0, 4))
        kwargs["x_val"], kwargs["y_val"] = torch.rand(m, *shape), torch.randint(num_classes, (m,))
    if draw(st.booleans()):
        dim = math.prod(shape)
        cut = draw(st.integers(0, dim - 1))
        kwargs["feature_blocks"] = {"first": cut, "rest": dim - cut} if cut else {"all": dim}
    kwargs["batch_size"] = draw(st.integers(1, 5))
    return kwargs


def _nan_row(kwargs, draw):
    x = kwargs["x"].clone()
    x[draw(st.integers(0, len(x) - 1))].view(-1)[0] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    return {"x": x}


def _nan_val(kwargs, draw):
    x = torch.rand(2, *kwargs["x"].shape[1:])
    x[1].view(-1)[-1] = math.nan
    return {"x_val": x, "y_val": torch.zeros(2, dtype=torch.long), "val_fraction": 0.0}


# spoiler name -> (function of (valid kwargs, draw) giving the overrides, expected error types, expected field)
SPOILERS = {
    "x-nan-or-inf": (_nan_row, (ValueError,), "x"),
    "x-int-dtype": (lambda k, d: {"x": k["x"].round().to(d(int_dtypes))}, (TypeError,), "x"),
    "x-bool-dtype": (lambda k, d: {"x": k["x"] > 0}, (TypeError,), "x"),
    "x-complex-dtype": (lambda k, d: {"x": k["x"].float().to(torch.complex64)}, (TypeError,), "x"),
    "x-numpy": (lambda k, d: {"x": k["x"].float().numpy()}, (TypeError,), "x"),
    "x-list": (lambda k, d: {"x": k["x"].tolist()}, (TypeError,), "x"),
    "x-one-dimensional": (lambda k, d: {"x": k["x"].flatten()[: len(k["y"])]}, (ValueError,), "x"),
    "x-no-features": (lambda k, d: {"x": k["x"].flatten(1)[:, :0]}, (ValueError,), "x"),
    "y-float-dtype": (lambda k, d: {"y": k["y"].float()}, (TypeError,), "y"),
    "y-bool-dtype": (lambda k, d: {"y": k["y"] > 0}, (TypeError,), "y"),
    "y-numpy": (lambda k, d: {"y": k["y"].numpy()}, (TypeError,), "y"),
    "y-too-short": (lambda k, d: {"y": k["y"][:-1]}, (ValueError,), "y"),
    "y-two-dimensional": (lambda k, d: {"y": k["y"][:, None]}, (ValueError,), "y"),
    "y-above-range": (lambda k, d: {"y": k["y"].long() + k["num_classes"]}, (ValueError,), "y"),
    "y-negative": (lambda k, d: {"y": k["y"].long() - k["num_classes"]}, (ValueError,), "y"),
    "empty-client": (lambda k, d: {"x": k["x"][:0], "y": k["y"][:0]}, (ValueError,), "x"),
    "x_val-other-shape": (
        lambda k, d: {
            "x_val": torch.rand(2, math.prod(k["x"].shape[1:]) + 1),
            "y_val": torch.zeros(2).long(),
            "val_fraction": 0.0,
        },
        (ValueError,),
        "x_val",
    ),  # fmt: skip
    "x_val-nan": (_nan_val, (ValueError,), "x_val"),
    "y_val-wrong-length": (
        lambda k, d: {"x_val": torch.rand(3, *k["x"].shape[1:]), "y_val": torch.zeros(2).long(), "val_fraction": 0.0},
        (ValueError,),
        "y_val",
    ),
    "blocks-do-not-add-up": (
        lambda k, d: {"feature_blocks": {"a": math.prod(k["x"].shape[1:]) + d(st.integers(1, 3))}},
        (ValueError,),
        "feature_blocks",
    ),
    "block-width-not-an-int": (
        lambda k, d: {"feature_blocks": {"a": d(st.sampled_from([0, -1, 1.5, "2", True]))}},
        (ValueError,),
        "feature_blocks",
    ),
    "num_classes-not-an-int": (lambda k, d: {"num_classes": k["num_classes"] + 0.5}, (TypeError,), "num_classes"),
    "num_classes-zero": (lambda k, d: {"num_classes": 0}, (ValueError,), "num_classes"),
    "batch_size-not-an-int": (
        lambda k, d: {"batch_size": d(st.sampled_from([2.0, "8", None]))},
        (TypeError,),
        "batch_size",
    ),  # fmt: skip
    "batch_size-zero": (lambda k, d: {"batch_size": 0}, (ValueError,), "batch_size"),
    "val_fraction-not-a-number": (lambda k, d: {"val_fraction": "0.1"}, (TypeError,), "val_fraction"),
    "fractions-leave-nothing": (
        lambda k, d: {"val_fraction": 0.5, "test_fraction": 0.5},
        (ValueError,),
        "test_fraction",
    ),  # fmt: skip
    "client_id-not-a-string": (
        lambda k, d: {"client_id": d(st.sampled_from([3, None, 2.5]))},
        (TypeError,),
        "client_id",
    ),  # fmt: skip
    "client_id-empty": (lambda k, d: {"client_id": ""}, (ValueError,), "client_id"),
}


def refusal(build) -> ValueError | TypeError | None:
    """The clean error ``build()`` raises, or ``None`` when it works (any other exception propagates)."""
    try:
        build()
    except (ValueError, TypeError) as err:
        return err
    return None


def build_and_set_up(kwargs) -> ClientDataModule:
    client = ClientDataModule(**kwargs)
    client.setup("fit")
    return client


def assert_works(client: ClientDataModule, kwargs) -> None:
    """A valid client's description and batches agree with its data."""
    spec, n = client.spec, len(kwargs["y"])
    held_out_tensors = kwargs.get("x_val") is not None
    assert spec.num_train >= 1
    assert spec.num_train + (0 if held_out_tensors else spec.num_val) + spec.num_test == n
    assert spec.input_shape == tuple(kwargs["x"].shape[1:])
    assert set(spec.classes) <= set(kwargs["y"].tolist())
    seen = 0
    for x, y in client.train_dataloader():
        assert x.shape[1:] == kwargs["x"].shape[1:]
        assert x.dtype == kwargs["x"].dtype
        assert y.dtype == torch.int64
        assert len(y) == len(x) <= kwargs["batch_size"]
        seen += len(y)
    assert seen == spec.num_train


def assert_clean_error(err: BaseException, client_id: str, field: str | None = None) -> None:
    match = FIELD.search(str(err))
    assert match, f"the message names no client and field: {err}"
    assert match.group(1) == str(client_id), str(err)
    if field is not None:
        assert match.group(2) == field, str(err)


@FAST
@given(kwargs=valid_client())
def test_a_valid_client_works_or_only_its_splits_leave_no_training_data(kwargs):
    err = refusal(lambda: build_and_set_up(kwargs))
    if err is None:
        assert_works(build_and_set_up(kwargs), kwargs)
        return
    # the only refusal of valid data: fractions of a tiny client leave no training sample
    assert isinstance(err, ValueError)
    assert_clean_error(err, kwargs["client_id"], "x")
    assert "none left for training" in str(err)
    assert len(kwargs["y"]) <= 4


@FAST
@given(kwargs=valid_client(), spoiler=st.sampled_from(sorted(SPOILERS)), data=st.data())
def test_a_spoiled_client_is_refused_naming_the_client_and_the_field(kwargs, spoiler, data):
    spoil, errors, field = SPOILERS[spoiler]
    kwargs = kwargs | spoil(kwargs, data.draw)
    with pytest.raises(errors) as raised:
        build_and_set_up(kwargs)
    assert_clean_error(raised.value, kwargs["client_id"], field)


@FAST
@given(
    clients=st.lists(valid_client(), min_size=1, max_size=5), spoiled=st.integers(0, 4), data=st.data()
)  # fmt: skip
def test_a_federation_names_its_faulty_client(clients, spoiled, data):
    """Unique ids and one label space; the one spoiled client (if any) is the one the error names."""
    num_classes = max(kwargs["num_classes"] for kwargs in clients)
    clients = [kwargs | {"client_id": f"site_{i}", "num_classes": num_classes} for i, kwargs in enumerate(clients)]
    expected = None
    if spoiled < len(clients):
        name = data.draw(st.sampled_from(["x-nan-or-inf", "y-above-range", "x-int-dtype", "blocks-do-not-add-up"]))
        spoil, _, expected = SPOILERS[name]
        clients[spoiled] = clients[spoiled] | spoil(clients[spoiled], data.draw)
    federation = FederatedDataModule([ClientDataModule(**kwargs) for kwargs in clients])
    err = refusal(federation.setup)
    if err is None:
        assert expected is None
        assert federation.client_ids == [f"site_{i}" for i in range(len(clients))]
        assert all(spec.num_classes == num_classes for spec in federation.specs.values())
        return
    tiny_split = "none left for training" in str(err)
    assert expected is not None or tiny_split, str(err)
    culprit = FIELD.search(str(err)).group(1)
    assert culprit == f"site_{spoiled}" or tiny_split, str(err)
    assert_clean_error(err, culprit, "x" if tiny_split else expected)


@FAST
@given(sizes=st.lists(st.integers(1, 4), min_size=2, max_size=4), data=st.data())
def test_federations_refuse_repeated_ids_and_disagreeing_label_spaces(sizes, data):
    clients = [ClientDataModule(f"c{i}", torch.rand(n, 2), torch.zeros(n, dtype=torch.long), 2) for i, n in
               enumerate(sizes)]  # fmt: skip
    other = data.draw(st.integers(1, len(sizes) - 1))
    repeated = FederatedDataModule([*clients, ClientDataModule("c0", torch.rand(1, 2), torch.zeros(1).long(), 2)])
    with pytest.raises(ValueError, match=r"\['c0'\] appear more than once"):
        repeated.setup()
    clients[other] = ClientDataModule(f"c{other}", torch.rand(1, 2), torch.zeros(1).long(), 3)
    with pytest.raises(ValueError, match=rf"client 'c{other}': field 'num_classes' is 3 but client 'c0' has 2"):
        FederatedDataModule(clients).setup()


def test_numpy_labels_of_a_valid_client_are_refused_by_type_not_by_a_crash():
    with pytest.raises(TypeError, match="client 'a': field 'y' must be a torch.Tensor"):
        build_and_set_up({"client_id": "a", "x": torch.rand(3, 2), "y": np.zeros(3, dtype=np.int64), "num_classes": 2})
