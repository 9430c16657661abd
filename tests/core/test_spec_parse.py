"""ClientSpec.parse: a client description from outside the process, each field's type and range checked."""

import pytest

from fedhet.core import ClientSpec, SpecLimits

GOOD = {
    "client_id": "site_a",
    "input_shape": [2, 3],
    "num_classes": 4,
    "classes": [0, 3],
    "num_train": 10,
    "num_val": 0,
    "num_test": 5,
    "feature_blocks": [["x", 4], ["y", 2]],
}


def test_parse_reads_back_what_to_dict_writes():
    spec = ClientSpec("a", (1, 2, 2), num_classes=3, classes=(0, 2), num_train=7, feature_blocks={"p": 3, "q": 1})
    assert ClientSpec.parse(spec.to_dict(), "file.ckpt") == spec
    assert ClientSpec.from_dict(spec.to_dict()) == spec


def test_parse_fills_the_optional_fields_with_their_defaults():
    spec = ClientSpec.parse({"client_id": "a", "input_shape": (3,), "num_classes": 2}, "node")
    assert spec == ClientSpec("a", (3,), num_classes=2)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("client_id", "", id="empty-id"),
        pytest.param("client_id", 7, id="int-id"),
        pytest.param("client_id", "x" * 257, id="long-id"),
        pytest.param("input_shape", [], id="empty-shape"),
        pytest.param("input_shape", [0, 6], id="zero-size"),
        pytest.param("input_shape", [-2, -3], id="negative-sizes"),
        pytest.param("input_shape", [10**6, 10**6], id="too-many-features"),
        pytest.param("input_shape", "6", id="str-shape"),
        pytest.param("input_shape", [2.0, 3], id="float-size"),
        pytest.param("num_classes", 0, id="no-classes"),
        pytest.param("num_classes", True, id="bool-classes"),
        pytest.param("num_classes", 10**7, id="too-many-classes"),
        pytest.param("classes", [0, 4], id="class-out-of-range"),
        pytest.param("classes", [1, 1], id="repeated-class"),
        pytest.param("classes", {"0": 1}, id="mapping-classes"),
        pytest.param("num_train", -1, id="negative-count"),
        pytest.param("num_val", False, id="bool-count"),
        pytest.param("num_test", 10**10, id="too-many-samples"),
        pytest.param("num_train", "10", id="str-count"),
        pytest.param("feature_blocks", [["x", 5], ["y", 2]], id="widths-off"),
        pytest.param("feature_blocks", [["x", 6, 1]], id="triple"),
        pytest.param("feature_blocks", [[3, 6]], id="unnamed-block"),
        pytest.param("feature_blocks", [["x", 3], ["x", 3]], id="repeated-block"),
        pytest.param("feature_blocks", [["x", 0], ["y", 6]], id="empty-block"),
        pytest.param("feature_blocks", "x", id="str-blocks"),
    ],
)
def test_a_bad_field_is_refused_in_one_line_naming_the_source_and_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^export/a\.ckpt: field '{field}' ") as caught:
        ClientSpec.parse({**GOOD, field: value}, "export/a.ckpt")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("missing", ["client_id", "input_shape", "num_classes"])
def test_a_missing_required_field_is_named(missing):
    fields = {name: value for name, value in GOOD.items() if name != missing}
    with pytest.raises(ValueError, match=rf"^src: field '{missing}' is missing$"):
        ClientSpec.parse(fields, "src")


def test_an_unknown_field_or_a_non_mapping_is_refused():
    with pytest.raises(ValueError, match=r"^src: field 'weights' is not a ClientSpec field$"):
        ClientSpec.parse({**GOOD, "weights": 1}, "src")
    with pytest.raises(ValueError, match=r"^src: the client spec is a list"):
        ClientSpec.parse([GOOD], "src")


def test_the_limits_are_the_callers():
    limits = SpecLimits(max_features=5, max_classes=3, max_samples=9, max_blocks=1, max_id_length=2)
    small = {"client_id": "ab", "input_shape": [5], "num_classes": 3, "num_train": 9, "feature_blocks": [["x", 5]]}
    assert ClientSpec.parse(small, "s", limits).input_dim == 5
    for field, value in [
        ("client_id", "abc"),
        ("input_shape", [6]),
        ("num_classes", 4),
        ("num_train", 10),
        ("feature_blocks", [["x", 2], ["y", 3]]),
    ]:
        with pytest.raises(ValueError, match=f"field '{field}'"):
            ClientSpec.parse({**small, field: value}, "s", limits)


def test_limits_are_frozen():
    with pytest.raises(AttributeError):
        SpecLimits().max_blocks = 3  # type: ignore[misc]
