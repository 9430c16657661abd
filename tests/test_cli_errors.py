"""Data and setup errors end the command with one line (exit status 1); ``--debug`` shows the traceback."""

import sys
from pathlib import Path

import pytest

from fedhet.cli import main

CONFIGS = Path(__file__).parents[1] / "configs"


@pytest.fixture(autouse=True)
def _argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["fedhet"])


def run(args):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return exit_info.value.code


def test_testing_before_training_is_one_line(tmp_path):
    args = ["test", "-c", str(CONFIGS / "fedavg" / "digits.yaml"), "--trainer.default_root_dir", str(tmp_path)]
    code = run([*args, "--ckpt_path", "last"])
    assert isinstance(code, str)
    assert code.startswith("fedhet: error: ckpt_path='last' but no version folder")
    assert "nothing was trained yet" in code
    assert code.count("\n") == 1
    assert code.endswith("(--debug or FEDHET_DEBUG=1 shows the traceback)")
    with pytest.raises(FileNotFoundError, match="nothing was trained yet"):
        main([*args, "--ckpt_path", "last", "--debug"])


def test_a_missing_data_file_is_one_line_that_says_how_to_get_it(tmp_path):
    missing = tmp_path / "covtype.data.gz"
    args = ["fit", "-c", str(CONFIGS / "gl" / "covertype.yaml"), "--data.init_args.path", str(missing)]
    code = run([*args, "--trainer.default_root_dir", str(tmp_path)])
    assert isinstance(code, str)
    assert code.startswith("fedhet: error: Covertype file")
    assert str(missing) in code
    assert "archive.ics.uci.edu" in code


def test_debug_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDHET_DEBUG", "1")
    args = ["test", "-c", str(CONFIGS / "fedavg" / "digits.yaml"), "--trainer.default_root_dir", str(tmp_path)]
    with pytest.raises(FileNotFoundError):
        main([*args, "--ckpt_path", "last"])
