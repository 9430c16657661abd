"""The README is a map that holds as written: its Python example runs, its links resolve, its loggers work.

The Python blocks of ``docs/usage.md``, where the README's longer examples moved, run here too.
"""

import re
import shlex
from pathlib import Path

import pytest

from fedhet.cli import FederatedCLI

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
PAGES = {name: (ROOT / name).read_text() for name in ("README.md", "docs/usage.md")}
BLOCKS = [
    pytest.param(block, id=f"{name}-{index}")
    for name, text in PAGES.items()
    for index, block in enumerate(re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL))
]


def test_the_readme_is_a_short_map_with_an_example():
    assert len(README.splitlines()) <= 150
    assert re.search(r"```python\n", README)
    assert 'pip install torch==2.13.0 -e ".[test]" && fedhet fit -c configs/fedavg/digits.yaml' in README
    assert "ruff check . && ruff format --check . && lint-imports && mypy && pytest" in README


@pytest.mark.parametrize("block", BLOCKS)
def test_python_example_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write their logs and checkpoints in the working directory
    exec(compile(block, "example", "exec"), {})


@pytest.mark.parametrize("name", sorted(PAGES))
def test_relative_links_resolve(name):
    base = (ROOT / name).parent
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", PAGES[name]):
        if "://" not in target:
            assert (base / target).exists(), f"{name} links to {target}, which does not exist"


LOGGERS = re.findall(r"^- \w[^:]*: `(--trainer\.logger=[^`]+)`", README, flags=re.MULTILINE)


def test_the_readme_names_its_loggers():
    assert len(LOGGERS) == 2  # W&B and TensorBoard; CSV is the default


@pytest.mark.slow
@pytest.mark.parametrize("options", LOGGERS, ids=lambda options: re.findall(r"\w+Logger", options)[0])
def test_a_logger_the_readme_names_works_as_written(options, tmp_path, monkeypatch):
    if "TensorBoard" in options:
        pytest.importorskip("tensorboard", reason="the tensorboard extra")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    config = str(ROOT / "configs" / "fedavg" / "digits.yaml")
    quiet = ["--trainer.rounds", "1", "--trainer.reporting.progress_bar", "false"]
    cli = FederatedCLI(args=["fit", "-c", config, *shlex.split(options), *quiet])
    assert len(cli.trainer.history) == 1
    assert any(tmp_path.rglob("*")), "the logger wrote nothing"
