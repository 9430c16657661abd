"""The federations build from a YAML ``data:`` section, as ``fedhet fit -c`` reads it."""

import pytest
import yaml
from jsonargparse import ArgumentParser

from fedhet.datamodules import (
    CovertypeFederation,
    DigitsFamilyFederation,
    FederatedDataModule,
    HeartFederation,
    MultipleFeaturesFederation,
)

from .covtype_fixture import FIXTURE


def build(data):
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(FederatedDataModule, "data")
    config = parser.parse_string(yaml.safe_dump({"data": data}))
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in jsonargparse 4.49
    return instantiate(config).data


@pytest.mark.parametrize(
    ("class_path", "init_args", "expected", "dims"),
    [
        (
            "HeartFederation",
            {"sites": ["cleveland", "saheart", "faisalabad"], "missing": "code"},
            HeartFederation,
            [13, 9, 12],
        ),
        ("HeartFederation", {"missing": "indicator", "seed": 3}, HeartFederation, [23, 23, 23, 23]),
        (
            "MultipleFeaturesFederation",
            {"client_views": [["fou", "kar"], ["kar", "pix"]], "client_classes": [[0, 1, 2], [2, 3]]},
            MultipleFeaturesFederation,
            [140, 304],
        ),
        (
            "DigitsFamilyFederation",
            {"sources": ["mfeat_pix", "sklearn_digits"], "flatten": True},
            DigitsFamilyFederation,
            [240, 64],
        ),
        (
            "CovertypeFederation",
            {"path": str(FIXTURE), "num_train": 200, "num_val": 60, "features": "gl", "download": False},
            CovertypeFederation,
            [11, 11, 11, 11],
        ),
    ],
)
def test_builds_from_yaml(class_path, init_args, expected, dims):
    federation = build({"class_path": f"fedhet.datamodules.{class_path}", "init_args": init_args})
    assert type(federation) is expected
    assert [spec.input_dim for spec in federation.specs.values()] == dims


def test_bad_value_is_refused_before_loading():
    with pytest.raises(Exception, match="missing"):
        build({"class_path": "fedhet.datamodules.HeartFederation", "init_args": {"missing": "drop"}})
