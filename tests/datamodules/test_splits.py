"""The split arguments' base: checked once with the class and field named, recorded as the subclass's arguments."""

from __future__ import annotations

import inspect

import pytest
from jsonargparse import ArgumentParser

from fedhet import datamodules
from fedhet.datamodules import (
    CovertypeFederation,
    DigitsFederation,
    HeartFederation,
    NoisyFeaturesToy,
    PartitionedFederation,
    RotatedBlobsDomains,
    SplitFederation,
    VowelFederation,
)

SPLIT_ARGUMENTS = ("val_fraction", "test_fraction", "batch_size", "eval_batch_size", "seed")


def _federations() -> list[type[SplitFederation]]:
    found = [getattr(datamodules, name) for name in datamodules.__all__]
    return [
        cls
        for cls in found
        if isinstance(cls, type) and issubclass(cls, SplitFederation) and cls is not SplitFederation
    ]


def test_every_built_federation_shares_the_base():
    names = {cls.__name__ for cls in _federations()}
    assert len(names) == 17
    assert {"CSVFederation", "DomainFederation", "HybridFederation", "VowelFederation"} <= names


@pytest.mark.parametrize("cls", [DigitsFederation, PartitionedFederation, RotatedBlobsDomains, HeartFederation])
@pytest.mark.parametrize(
    ("arguments", "field", "error"),
    [
        ({"batch_size": 0}, "batch_size", ValueError),
        ({"eval_batch_size": 2.0}, "eval_batch_size", TypeError),
        ({"test_fraction": 1.0}, "test_fraction", ValueError),
        ({"val_fraction": -0.1}, "val_fraction", ValueError),
    ],
)
def test_a_bad_split_argument_is_refused_naming_the_class_and_the_field(cls, arguments, field, error):
    with pytest.raises(error, match=f"^{cls.__name__}: field '{field}' is "):
        cls(**arguments)


def test_shares_must_leave_training_samples_unless_validation_is_a_share_of_the_rest():
    with pytest.raises(ValueError, match="field 'test_fraction' is 0.5; expected below 1 - val_fraction = 0.4"):
        DigitsFederation(val_fraction=0.6, test_fraction=0.5)
    heart = HeartFederation(val_fraction=0.6, test_fraction=0.5)  # validation: 60 % of the other half
    assert (heart.val_fraction, heart.test_fraction) == (0.6, 0.5)


@pytest.mark.parametrize("cls", [DigitsFederation, NoisyFeaturesToy, VowelFederation, CovertypeFederation])
def test_the_hyperparameters_are_the_subclass_arguments_in_its_order(cls):
    federation = cls(seed=7, batch_size=9)
    assert list(federation.hparams) == list(inspect.signature(cls).parameters)
    assert (federation.hparams["seed"], federation.seed, federation.batch_size) == (7, 7, 9)


def test_shares_a_subclass_does_not_take_are_none():
    assert (NoisyFeaturesToy().val_fraction, NoisyFeaturesToy().test_fraction) == (0.0, None)
    assert (VowelFederation().val_fraction, VowelFederation().test_fraction) == (None, None)


def test_the_arguments_of_a_users_subclass_are_recorded_too():
    class Mine(DigitsFederation):
        def __init__(self, extra: int = 3, **kwargs: object) -> None:
            super().__init__(num_clients=4, **kwargs)

    mine = Mine(eval_batch_size=64)
    assert (mine.hparams["extra"], mine.hparams["eval_batch_size"], mine.eval_batch_size) == (3, 64, 64)


def test_a_subclass_without_a_split_argument_is_refused_naming_it():
    class NoSeed(SplitFederation):
        def __init__(self, batch_size: int = 8, eval_batch_size: int = 8) -> None:
            super().__init__()

    with pytest.raises(TypeError, match=r"^NoSeed: its constructor must take the split argument\(s\) \['seed'\]"):
        NoSeed()


@pytest.mark.parametrize("cls", _federations(), ids=lambda cls: cls.__name__)
def test_help_keeps_each_class_defaults_and_a_description_of_every_split_argument(cls):
    parser = ArgumentParser()
    parser.add_class_arguments(cls, "data")
    defaults = parser.get_defaults().data
    for name, parameter in inspect.signature(cls).parameters.items():
        if name in SPLIT_ARGUMENTS:
            assert defaults[name] == parameter.default
            action = next(action for action in parser._actions if action.dest == f"data.{name}")
            assert action.help, (cls.__name__, name)
