"""What a command loads before it works: `fedhet --help` no Lightning, `fit` no method, POT or Optuna it does not use.

Each command runs in a fresh interpreter that prints the modules it loaded (``sys.modules``); no timing.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedhet.cli import FederatedCLI, _lightning, main, usage
from fedhet.cli._lightning import SUBCOMMANDS, ParserPrebuilt
from fedhet.cli_text import COMMANDS

ROOT = Path(__file__).parents[1]
HEAVY = ("torch", "lightning", "torchmetrics", "ot", "scipy", "sklearn", "optuna", "flwr", "jsonargparse", "numpy")
METHODS = ("flic", "fedpac", "hyfem", "feddadil", "fedhenn", "global_layers")


def loaded(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code`` (which may exit)."""
    script = f"import json, sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def top_level(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_import_fedhet_loads_fedhet_alone():
    modules = loaded("import fedhet")
    assert {m for m in modules if m.startswith("fedhet")} == {"fedhet"}
    assert not top_level(modules) & set(HEAVY)


def test_fedhet_help_lists_the_commands_without_lightning():
    modules = loaded("from fedhet.cli import main; main(['--help'])")
    assert {m for m in modules if m.startswith("fedhet")} == {"fedhet", "fedhet._lazy", "fedhet.cli", "fedhet.cli_text"}
    assert not top_level(modules) & set(HEAVY)


def test_a_flower_clientapp_module_loads_flower_and_torch_but_no_lightning_nor_a_method():
    pytest.importorskip("flwr")
    code = "from fedhet.integrations.flower.apps import make_client_app, make_server_app; make_client_app('f.yaml')"
    modules = loaded(code)
    assert {"flwr", "torch", "fedhet.core", "fedhet.integrations.flower.apps"} <= modules
    assert not top_level(modules) & {"lightning", "torchmetrics", "ot", "scipy", "sklearn", "optuna", "jsonargparse"}
    assert not {
        m for m in modules if m.startswith(("fedhet.plugins", "fedhet.modules", "fedhet.callbacks", "fedhet.cli"))
    }
    assert not modules & {"fedhet.integrations.flower.engine", "fedhet.integrations.flower.records"}


def test_a_suites_parent_process_loads_no_torch_nor_lightning():
    """``fedhet compare`` reads run folders and results; torch and Lightning load in its fork server and runs only."""
    code = "from fedhet.experiments import compare, runs; runs.resume_point(runs.Path('no_run')); import fedhet.plugins"
    modules = loaded(code)  # resume_point: what the parent reads of a run folder before each run
    heavy = {"torch", "lightning", "torchmetrics", "ot", "scipy", "sklearn", "optuna", "jsonargparse"}
    assert not top_level(modules) & heavy
    assert not {m for m in modules if m.startswith(("fedhet.plugins.rounds", "fedhet.modules", "fedhet.callbacks"))}


def test_the_help_names_fedhet_and_every_command(capsys):
    assert set(COMMANDS) == {*SUBCOMMANDS, "compare"}
    text = usage()
    assert text.startswith("usage: fedhet {fit,validate,test,export,compare}")
    assert "Lightning Trainer command line tool" not in text
    out = subprocess.run(
        [sys.executable, "-m", "fedhet", "fit", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("usage: fedhet [options] fit")


def test_a_fedavg_fit_loads_no_other_method_nor_pot_optuna_or_flower(tmp_path):
    args = ["fit", "-c", "configs/fedavg/digits.yaml", "--trainer.rounds=1", f"--trainer.default_root_dir={tmp_path}"]
    modules = loaded(f"from fedhet.cli import main; main({args!r} + ['--trainer.reporting.progress_bar=false'])")
    assert {"fedhet.modules.baselines", "fedhet.plugins.rounds.trainer"} <= modules
    unused = {f"fedhet.modules.{m}" for m in METHODS} | {f"fedhet.callbacks.{m}" for m in METHODS}
    assert not modules & unused
    assert not top_level(modules) & {"ot", "optuna", "flwr"}
    assert not {m for m in modules if m.startswith("fedhet.integrations")}
    assert list(tmp_path.glob("version_0/checkpoints/*.ckpt"))  # the fit ran


def test_a_command_builds_the_parser_of_its_own_subcommand_only(monkeypatch, capsys):
    built = []
    add = FederatedCLI.add_core_arguments_to_parser
    monkeypatch.setattr(
        FederatedCLI, "add_core_arguments_to_parser", lambda cli, parser: built.append(1) or add(cli, parser)
    )
    with pytest.raises(SystemExit):
        main(["fit", "-c", str(ROOT / "configs" / "fedavg" / "digits.yaml"), "--print_config"])
    assert len(built) == 1
    assert "class_path: fedhet.modules.FedAvg" in capsys.readouterr().out
    built.clear()
    with pytest.raises(SystemExit) as ended:  # no known subcommand: every parser, and argparse's list of them
        main(["fitt"])
    assert ended.value.code == 2
    assert len(built) == len(SUBCOMMANDS)
    assert "fit" in capsys.readouterr().err


def test_a_prebuilt_parser_is_taken_once_by_the_next_command_built_alike(monkeypatch, capsys):
    """A suite's fork server builds its runs' parsers ahead; a command takes one, unused, and parses as it would."""
    monkeypatch.setattr(_lightning, "_PREBUILT", {})
    built = []
    add = FederatedCLI.add_core_arguments_to_parser
    monkeypatch.setattr(
        FederatedCLI, "add_core_arguments_to_parser", lambda cli, parser: built.append(1) or add(cli, parser)
    )
    with pytest.raises(ParserPrebuilt):
        FederatedCLI(args=["fit"], prebuild=True)
    with pytest.raises(ParserPrebuilt):
        FederatedCLI(args=["test"], prebuild=True, full_errors=True)  # not what `fedhet fit` builds
    assert len(built) == 2
    command = ["fit", "-c", str(ROOT / "configs" / "fedavg" / "digits.yaml"), "--trainer.rounds=3", "--print_config"]
    printed = []
    for _ in range(2):  # the first takes the fit parser built ahead, the second builds its own
        with pytest.raises(SystemExit):
            main(command)
        printed.append(capsys.readouterr().out)
    assert len(built) == 3
    assert printed[0] == printed[1]
    assert "rounds: 3" in printed[0]
    assert len(_lightning._PREBUILT) == 1  # the test parser: no fit took it
