"""The private LightningCLI members that ``fedhet.cli`` builds on keep their shapes (Lightning is pinned to 2.6.x).

LightningCLI has no public hook to instantiate a nested class with only its own hyperparameters, to add a trainer
that is not a ``lightning.Trainer``, or to read one subcommand's parser and config; ``fedhet.cli`` uses these private
members for that. When a Lightning release moves one of them, this test names it before a user meets the error, and
the pin in ``pyproject.toml`` can only be raised together with ``cli.py``.
"""

import inspect

from lightning.pytorch import cli

from fedhet.cli import FederatedCLI


def parameters(function):
    return list(inspect.signature(function).parameters)


def test_private_lightning_cli_members_keep_their_signatures():
    assert parameters(cli._InstantiatorFn.__init__) == ["self", "cli", "key"]
    assert parameters(cli._InstantiatorFn.__call__) == [
        "self",
        "class_type",
        "args",
        "applied_instantiation_links",
        "kwargs",
    ]
    assert parameters(cli.LightningCLI._get) == ["self", "config", "key", "default"]
    assert parameters(cli.LightningCLI._parser) == ["self", "subcommand"]
    assert parameters(cli.LightningCLI._add_instantiators) == ["self"]


def test_fedhet_overrides_the_private_hook_lightning_calls():
    assert "_add_instantiators" in vars(FederatedCLI)
    source = inspect.getsource(cli.LightningCLI.__init__)
    assert "self._add_instantiators()" in source  # Lightning still calls the hook that FederatedCLI overrides
