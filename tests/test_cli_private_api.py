"""The private LightningCLI and argparse members that ``fedhet.cli`` builds on keep their shapes.

Lightning is pinned to 2.6.x. ``fedhet.cli`` uses public extension points where there are some: ``parser_class``
and ``init_parser`` for its parser, ``ArgumentParser.error`` for one-line errors, ``formatter_class`` for the help,
``load_from_checkpoint_support=False`` with jsonargparse's ``instantiate(..., instantiators=...)`` (not the private
``_add_instantiators`` hook, nor the deprecated ``add_instantiator``) for the hyperparameters that modules save.
What has no public form is checked here:

- ``lightning.pytorch.cli._InstantiatorFn``: the instantiator that saves a module's config as its hyperparameters
  (``load_from_checkpoint`` rebuilds the module from them); it reads ``cli.config_dump``, which ``FederatedCLI``
  sets (without the deprecated ``skip_none`` of ``LightningCLI._dump_config``).
- ``LightningCLI._parser(subcommand)``: the subcommand's parser, for its ``callback_keys`` and its ``prog``.
- ``HelpFormatter._get_help_string(action)``: argparse's hook for an option's help (argparse's own
  ``ArgumentDefaultsHelpFormatter`` and jsonargparse's ``DefaultHelpFormatter`` override it).

When a release moves one of them, this test names it before a user meets the error, and the pin in
``pyproject.toml`` can only be raised together with ``cli.py``.
"""

import argparse
import inspect
import sys
import warnings
from pathlib import Path

from jsonargparse import ArgumentParser, DefaultHelpFormatter
from lightning.pytorch import cli

from fedhet.cli import FederatedArgumentParser, FederatedCLI, PlainHelpFormatter


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
    assert "self.cli.config_dump" in inspect.getsource(cli._InstantiatorFn.__call__)
    assert 'if hasattr(self, "config_dump")' in inspect.getsource(cli.LightningCLI._dump_config)
    assert parameters(cli.LightningCLI._parser) == ["self", "subcommand"]


def test_fedhet_uses_public_hooks_where_there_are_some():
    assert "_add_instantiators" not in vars(FederatedCLI)
    assert "self._add_instantiators()" in inspect.getsource(cli.LightningCLI.__init__)
    assert "if load_from_checkpoint_support:" in inspect.getsource(cli.LightningCLI.__init__)  # FederatedCLI: off
    assert "instantiators" in parameters(ArgumentParser.instantiate)  # jsonargparse >= 4.49
    assert parameters(ArgumentParser.error) == ["self", "message", "ex"]
    assert issubclass(FederatedArgumentParser, cli.LightningArgumentParser)


def test_the_help_formatter_hook_is_argparse_s():
    assert parameters(argparse.HelpFormatter._get_help_string) == ["self", "action"]
    assert "_get_help_string" in vars(DefaultHelpFormatter)
    assert "self._get_help_string(action)" in inspect.getsource(DefaultHelpFormatter._expand_help)
    assert issubclass(PlainHelpFormatter, DefaultHelpFormatter)


def test_building_the_cli_calls_no_deprecated_jsonargparse_api(monkeypatch, recwarn):
    monkeypatch.setenv("JSONARGPARSE_DEPRECATION_WARNINGS", "all")  # else each kind is shown once per process
    monkeypatch.setattr(sys, "argv", ["fedhet"])
    config = Path(__file__).parents[1] / "configs" / "fedavg" / "digits.yaml"
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        FederatedCLI(args=["-c", str(config)], run=False)
    assert [str(w.message) for w in recwarn if "jsonargparse" in type(w.message).__name__.lower()] == []
