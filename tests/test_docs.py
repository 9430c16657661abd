"""The docs hold as written: docs/writing-a-method.md's module, upload contract, config and reproduction script run,
and the site with its API reference (mkdocs.yml) builds without a warning."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedhet.cli import FederatedCLI
from fedhet.plugins import StackedRunner
from tests.plugins.test_uploads import blobs
from tests.plugins.uploads import UploadCase, check_uploads

ROOT = Path(__file__).parents[1]
GUIDE = (ROOT / "docs" / "writing-a-method.md").read_text()
BLOCKS = dict(re.findall(r"<!-- (?:file|run): (\S+) -->\n```\w+\n(.*?)```", GUIDE, flags=re.DOTALL))


@pytest.fixture
def guide(tmp_path, monkeypatch):
    """The guide's files written to a folder on ``sys.path``, which is also the working directory."""
    for name in ("protofed.py", "protofed.yaml", "protofed_digits.py"):
        (tmp_path / name).write_text(BLOCKS[name])
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("protofed", "protofed_digits"):
        sys.modules.pop(name, None)


def test_the_guide_has_every_piece():
    assert set(BLOCKS) == {"protofed.py", "upload-contract", "protofed.yaml", "protofed_digits.py"}
    assert 50 <= len(BLOCKS["protofed.py"].splitlines()) <= 90  # a complete method in about 60 lines


def test_the_upload_contract_line_holds(guide):
    import protofed

    namespace = {"UploadCase": UploadCase, "blobs": blobs, **vars(protofed)}
    (case,) = eval("{" + BLOCKS["upload-contract"] + "}", namespace).values()
    check_uploads(case, str(guide / "uploads"))


def test_the_server_step_is_the_count_weighted_mean_of_the_prototypes():
    namespace: dict = {}
    exec(compile(BLOCKS["protofed.py"], "protofed.py", "exec"), namespace)
    updates = [
        namespace["ClientUpdate"]("a", 5, {}, {"protofed/prototypes": torch.tensor([[1.0], [0.0]]),
                                             "protofed/counts": torch.tensor([3.0, 0.0])}),
        namespace["ClientUpdate"]("b", 5, {}, {"protofed/prototypes": torch.tensor([[3.0], [2.0]]),
                                             "protofed/counts": torch.tensor([1.0, 2.0])}),
    ]  # fmt: skip
    server = namespace["ServerState"]()
    namespace["PrototypeAveraging"]().on_aggregate_end(None, 0, server, updates)
    torch.testing.assert_close(server.statistics["protofed/global_prototypes"], torch.tensor([[1.5], [2.0]]))


def test_the_config_runs_under_the_cli(guide):
    cli = FederatedCLI(args=["fit", "-c", "protofed.yaml", "--trainer.rounds", "2", "--trainer.logger", "false"])
    assert len(cli.trainer.history) == 2
    prototypes = cli.trainer.server_state.statistics["protofed/global_prototypes"]
    assert prototypes.shape == (10, 64)
    assert torch.isfinite(prototypes).all()


def test_the_guide_method_trains_in_stacks_as_one_client_at_a_time(guide):
    """Its one loss (sample_losses) and its stacking() let clients train in stacks, with the sequential results."""
    args = ["fit", "-c", "protofed.yaml", "--trainer.rounds", "2", "--trainer.logger", "false"]
    sequential = FederatedCLI(args=args).trainer.server_state.statistics["protofed/global_prototypes"]
    stacked = FederatedCLI(args=[*args, "--trainer.processes.stack_clients", "4"]).trainer
    assert isinstance(stacked.runner, StackedRunner)
    torch.testing.assert_close(stacked.server_state.statistics["protofed/global_prototypes"], sequential)


def test_the_reproduction_script_writes_its_table(guide, capsys):
    import protofed_digits

    results = protofed_digits.main(rounds=2, root=str(guide / "compare"))
    assert set(results) == {"FedRep", "ProtoFed"}
    assert all(0.0 <= accuracy <= 1.0 for accuracy in results.values())
    assert "| ProtoFed |" in capsys.readouterr().out


@pytest.mark.slow  # about 20 s: every docstring of the package is rendered
def test_the_site_and_its_api_reference_build_without_a_warning(tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    assert (tmp_path / "api" / "modules" / "index.html").exists()


def test_the_release_notes_keep_the_old_behaviour_with_real_options():
    """Every YAML block of the CHANGELOG's "Upgrading" notes names options the classes and the trainer accept."""
    import importlib
    import inspect

    import yaml

    from fedhet.plugins import FederatedTrainer

    changelog = (ROOT / "CHANGELOG.md").read_text()
    notes = changelog.split("### Upgrading from 0.1.0", 1)[1].split("\n### ", 1)[0]
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", notes, flags=re.DOTALL)]
    assert len(blocks) >= 5
    for block in blocks:
        assert set(block.get("trainer", {})) <= set(inspect.signature(FederatedTrainer).parameters)
        for part in ("model", "data"):
            if "class_path" in block.get(part, {}):
                module, name = block[part]["class_path"].rsplit(".", 1)
                accepted = inspect.signature(getattr(importlib.import_module(module), name)).parameters
                assert set(block[part]["init_args"]) <= set(accepted), block[part]
    for option in ("aggregate_every: epoch", "optimizer: adam", "anchor_update: paper", "personal_init: per_client"):
        assert option in notes
