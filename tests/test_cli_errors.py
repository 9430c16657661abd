"""Errors end the command in one line: usage errors with exit status 2, data and setup errors with 1.

``--debug`` or ``FEDHET_DEBUG=1`` shows jsonargparse's whole report or the traceback; ``--help`` shows no reST markup.
"""

import sys
from pathlib import Path

import pytest
import yaml

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


def test_a_diverged_fit_is_one_line_and_exit_status_3(tmp_path, capsys):
    """Every client's upload non-finite (a step size far too large): status 3, which a suite's tuner scores."""
    args = ["fit", "-c", str(CONFIGS / "fedavg" / "digits.yaml"), "--trainer.rounds", "1"]
    code = run([*args, "--model.init_args.lr", "1e30", "--trainer.default_root_dir", str(tmp_path)])
    assert code == 3
    line, hint = capsys.readouterr().err.strip().splitlines()[-2:]
    assert line.startswith("fedhet: error: round 0: 10 of 10 clients failed, more than max_client_failures=0.5")
    assert "non-finite upload" in line
    assert hint == "(--debug or FEDHET_DEBUG=1 shows the traceback)"


def test_debug_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDHET_DEBUG", "1")
    args = ["test", "-c", str(CONFIGS / "fedavg" / "digits.yaml"), "--trainer.default_root_dir", str(tmp_path)]
    with pytest.raises(FileNotFoundError):
        main([*args, "--ckpt_path", "last"])


# ---------------------------------------------------------------------------------------------------- usage errors
HINT = "(fedhet fit --help lists the options; --debug or FEDHET_DEBUG=1 shows the whole error)"


def write_csv(path, rows):
    path.write_text("".join(",".join(map(str, row)) + "\n" for row in rows))
    return str(path)


def csv_federation(tmp_path, second):
    """A config of a FederatedDataModule of two CSV clients, the second one read from ``second``'s rows."""
    good = write_csv(tmp_path / "site_a.csv", [("f1", "f2", "label"), (1, 2, 0), (3, 4, 1), (5, 6, 0), (7, 8, 1)])
    bad = write_csv(tmp_path / "site_b.csv", second)
    client = "fedhet.datamodules.CSVClientDataModule"
    config = {
        "model": {"class_path": "fedhet.modules.FedAvg", "init_args": {"hidden_dims": [8]}},
        "data": {
            "class_path": "fedhet.datamodules.FederatedDataModule",
            "init_args": {
                "clients": [
                    {"class_path": client, "init_args": {"path": good}},
                    {"class_path": client, "init_args": {"path": bad}},
                ]
            },
        },
        "trainer": {"rounds": 1, "default_root_dir": str(tmp_path / "run"), "reporting": {"progress_bar": False}},
    }
    path = tmp_path / "csv.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["fit", "-c", str(path)]


FEDAVG = ["fit", "-c", str(CONFIGS / "fedavg" / "digits.yaml")]
MISTAKES = {  # jsonargparse's report was 33 to 45 lines long for each of these (the usage, every type tried...)
    "mistyped-option": (
        lambda tmp_path: [*FEDAVG, "--trainer.roundz", "3"],
        "unrecognized arguments: --trainer.roundz 3",
    ),
    "wrong-type": (
        lambda tmp_path: [*FEDAVG, "--model.init_args.lr", "abc"],
        "model.init_args.lr: expected a float, got 'abc'",
    ),
    "unknown-class-path": (
        lambda tmp_path: [*FEDAVG, "--model.class_path", "fedhet.modules.FedAvgg"],
        "model.class_path: fedhet.modules has no class 'FedAvgg'",
    ),
    "missing-config-file": (
        lambda tmp_path: ["fit", "-c", str(tmp_path / "nosuch.yaml")],
        "config: File does not exist: '{tmp_path}/nosuch.yaml'",
    ),
    "csv-without-its-label-column": (
        lambda tmp_path: csv_federation(tmp_path, [("f1", "f2", "y"), (1, 2, 0)]),
        "site_b.csv: no label column 'label' (field 'label_column'); its columns are ['f1', 'f2', 'y']",
    ),
    "csv-with-a-string-column": (
        lambda tmp_path: csv_federation(tmp_path, [("f1", "f2", "label"), (1, 2, 0), (3, "x", 1)]),
        "site_b.csv row 3 column 'f2': 'x' is not a number",
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_usage_error_is_its_sentence_then_a_hint(mistake, tmp_path, capsys):
    args, sentence = MISTAKES[mistake]
    assert run(args(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"fedhet fit: error: {sentence.format(tmp_path=tmp_path)}", HINT]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_jsonargparse_s_whole_report(how, tmp_path, capsys, monkeypatch):
    args = [*FEDAVG, "--model.init_args.lr", "abc"]
    if how == "flag":
        args.append("--debug")
    else:
        monkeypatch.setenv("FEDHET_DEBUG", "1")
    assert run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: fedhet [options] fit")
    assert 'Parser key "lr":' in err
    assert len(err.splitlines()) > 10


# ---------------------------------------------------------------------------------------------------- --help
@pytest.mark.parametrize(
    "args",
    [
        [*FEDAVG, "--help"],
        [*FEDAVG, "--model.help", "FedAvg"],
        [*FEDAVG, "--data.help", "DigitsFederation"],
        ["fit", "-c", str(CONFIGS / "flic" / "noisy_toy.yaml"), "--model.help", "FLIC"],
        ["fit", "-c", str(CONFIGS / "flic" / "noisy_toy.yaml"), "--data.help", "NoisyFeaturesToy"],
    ],
    ids=["fit", "model", "data", "flic-model", "flic-data"],
)
def test_help_has_no_rest_markup(args, capsys):
    assert run(args) in (0, None)
    out = capsys.readouterr().out
    assert "--" in out
    for markup in (":class:", ":func:", ":meth:", ":math:", ":mod:", ":attr:", "``", ".. code-block::"):
        assert markup not in out, markup


def test_help_renders_roles_and_literals_as_their_text(capsys):
    assert run([*FEDAVG, "--help"]) in (0, None)
    out = " ".join(capsys.readouterr().out.split())
    assert "Train the federation for rounds rounds, resuming from ckpt_path" in out
    assert "each a ClientDataModule with its own data" in out
