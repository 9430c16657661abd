"""Every YAML shipped under ``configs/``, ``examples/`` and ``benchmarks/suites/`` is parsed by the command it is for.

``fedhet fit`` configs are built by ``tests/test_cli.py`` (``test_config_instantiates_the_classes_it_names``); here the
suites go through the preflight ``fedhet compare`` runs before any run (every method on every federation, searched
methods at both ends of every range), the federations alone (``configs/data``) after a method's config, and the Flower
App's config as ``fedhet fit -c`` takes it: all ``fedhet fit --print_config`` command lines in one subprocess. A file
none of these reads fails the coverage check.
"""

from pathlib import Path

import pytest

from fedhet.experiments import compare, preflight
from fedhet.experiments.suite import load_suite
from tests.test_cli import CONFIGS

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p for folder in ("configs", "examples", "benchmarks/suites") for p in (ROOT / folder).rglob("*.yaml"))
SUITES = sorted([*(ROOT / "configs" / "suites").glob("*.yaml"), *(ROOT / "benchmarks" / "suites").glob("*.yaml")])
METHOD = ROOT / "configs" / "fedavg" / "digits.yaml"  # what a federation alone is given after


def suite_command_lines(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The ``fedhet fit`` command lines ``fedhet compare`` checks before it runs each shipped suite."""
    commands: list[list[str]] = []
    with monkeypatch.context() as patch:
        patch.setattr(preflight, "check_commands", lambda lines, _: commands.extend(lines) or [None] * len(lines))
        for path in SUITES:
            suite = load_suite(path)
            compare.check_command_lines(suite, [(f, m) for f in suite.federations for m in suite.methods], {})
    return commands


def read_configs(command: list[str]) -> set[Path]:
    return {Path(command[i + 1]).resolve() for i, arg in enumerate(command) if arg == "-c"}


@pytest.mark.slow
def test_every_shipped_yaml_parses_with_the_command_it_is_for(monkeypatch, tmp_path):
    commands = suite_command_lines(monkeypatch)
    commands += [["fit", "-c", str(METHOD), "-c", str(p)] for p in sorted((ROOT / "configs" / "data").glob("*.yaml"))]
    commands += [["fit", "-c", str(p)] for p in sorted((ROOT / "examples").rglob("*.yaml"))]
    commands = [[*c, "--trainer.default_root_dir", str(tmp_path)] for c in commands]  # nothing written: parsed only
    read = {path for command in commands for path in read_configs(command)} | set(SUITES)
    read |= {path.resolve() for path in CONFIGS}  # built by tests/test_cli.py
    assert set(SHIPPED) - read == set(), "shipped YAML no test parses"
    errors = preflight.check_commands(commands)
    refused = [f"{' '.join(c[:5])}: {e}" for c, e in zip(commands, errors, strict=True) if e]
    assert refused == []
    assert not any(tmp_path.iterdir())
