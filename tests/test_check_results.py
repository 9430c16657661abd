"""benchmarks/check_results.py: a results file is stale exactly when the code it measures changed since its commit."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "check_results.py"
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _load():
    spec = importlib.util.spec_from_file_location("check_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


check_results = _load()


def _git(root: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def _commit(root: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", message)
    return _git(root, "rev-parse", "--short", "HEAD")


def _results(commit: str, script: str = "scale") -> str:
    return f"# table\n\n| a |\n|---|\n| 1 |\n\n- command: `python benchmarks/{script}.py --x 1`\n- commit: `{commit}`\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _commit(
        tmp_path,
        {
            "benchmarks/scale.py": "print(1)\n",
            "benchmarks/_common.py": "\n",
            "src/fedhet/plugins/rounds/trainer.py": "x = 1\n",
            "docs/notes.md": "a\n",
        },
        "code",
    )
    return tmp_path


def test_fresh_until_the_measured_code_changes(repo: Path) -> None:
    measured = _git(repo, "rev-parse", "--short", "HEAD")
    _commit(repo, {"benchmarks/results/scale.md": _results(measured)}, "results")
    _commit(repo, {"docs/notes.md": "b\n"}, "docs only")  # not measured code: still fresh
    verdict = check_results.check_file(repo, Path("benchmarks/results/scale.md"))
    assert (verdict.script, verdict.status, verdict.changed) == ("scale", "fresh", ())

    _commit(repo, {"src/fedhet/plugins/rounds/trainer.py": "x = 2\n"}, "engine change")
    verdict = check_results.check_file(repo, Path("benchmarks/results/scale.md"))
    assert (verdict.status, verdict.changed) == ("stale", ("src/fedhet/plugins/rounds/trainer.py",))


def test_the_script_itself_is_measured_code(repo: Path) -> None:
    measured = _git(repo, "rev-parse", "--short", "HEAD")
    _commit(repo, {"benchmarks/results/scale.md": _results(measured), "benchmarks/scale.py": "print(2)\n"}, "both")
    assert check_results.check_file(repo, Path("benchmarks/results/scale.md")).changed == ("benchmarks/scale.py",)


def test_content_not_history_decides(repo: Path) -> None:
    """A change and its revert leave the measured code as it was: the result is fresh again."""
    measured = _git(repo, "rev-parse", "--short", "HEAD")
    _commit(
        repo,
        {"benchmarks/results/scale.md": _results(measured), "src/fedhet/plugins/rounds/trainer.py": "x = 3\n"},
        "c",
    )
    _commit(repo, {"src/fedhet/plugins/rounds/trainer.py": "x = 1\n"}, "revert")
    assert check_results.check_file(repo, Path("benchmarks/results/scale.md")).status == "fresh"


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("# no footer\n", "unknown"),
        (_results("0123456789abcdef0123456789abcdef01234567"), "unknown"),  # a commit this repository does not hold
        (_results("abc1234-dirty"), "dirty"),
    ],
)
def test_unverifiable_results_are_flagged(repo: Path, text: str, status: str) -> None:
    _commit(repo, {"benchmarks/results/scale.md": text}, "results")
    assert check_results.check_file(repo, Path("benchmarks/results/scale.md")).status == status


def test_narrower_measured_paths_for_engine_scripts() -> None:
    paths = check_results.measured_paths("engine_overhead")
    assert "benchmarks/engine_overhead.py" in paths
    assert "src/fedhet/plugins" in paths
    assert "src/fedhet" not in paths
    assert check_results.measured_paths("scale")[-1] == "src/fedhet"


def test_a_script_in_a_subfolder_is_measured_code(repo: Path) -> None:
    """``benchmarks/parity/fedpac.py`` names its script with its folder, and a change to that script makes it stale."""
    measured = _commit(repo, {"benchmarks/parity/fedpac.py": "print(1)\n"}, "parity script")
    _commit(repo, {"benchmarks/results/parity_fedpac.md": _results(measured, "parity/fedpac")}, "results")
    verdict = check_results.check_file(repo, Path("benchmarks/results/parity_fedpac.md"))
    assert (verdict.script, verdict.status) == ("parity/fedpac", "fresh")
    _commit(repo, {"benchmarks/parity/fedpac.py": "print(2)\n"}, "script change")
    verdict = check_results.check_file(repo, Path("benchmarks/results/parity_fedpac.md"))
    assert (verdict.status, verdict.changed) == ("stale", ("benchmarks/parity/fedpac.py",))


SUITE = """name: s
federations: {heart: ../../configs/data/heart.yaml, own: null}
methods:
  fedavg: {config: ../../configs/fedavg/x.yaml}
  fedrep: {config: ../../configs/fedrep/x.yaml, overrides: {trainer.rounds: 2}}
seeds: [0]
baseline: fedavg
"""
TABLE = Path("benchmarks/results/suites/s/table.md")


def _suite_table(commit: str, suite: str = "benchmarks/suites/s.yaml", sha: str = "ab" * 32) -> str:
    return f"# Suite s\n\n- suite: `{suite}`\n- commit: `{commit}`\n- configs_sha256: `{sha}`\n\n| a |\n|---|\n"


@pytest.fixture
def suite_repo(repo: Path) -> tuple[Path, str]:
    """``repo`` with a suite naming two method configs and a data config, and its results at the suite's commit."""
    configs = {
        f"configs/{name}": "a: 1\n" for name in ("data/heart.yaml", "fedavg/x.yaml", "fedrep/x.yaml", "fedper/x.yaml")
    }
    _commit(repo, {"benchmarks/suites/s.yaml": SUITE, **configs}, "suite")
    measured = _git(repo, "rev-parse", "HEAD")  # fedhet compare records the full hash
    _commit(repo, {str(TABLE): _suite_table(measured)}, "results")
    return repo, measured


def test_suite_results_fresh_until_the_suite_or_a_config_it_names_changes(suite_repo: tuple[Path, str]) -> None:
    repo, _ = suite_repo
    _commit(repo, {"configs/fedper/x.yaml": "a: 2\n", "docs/notes.md": "c\n"}, "a config the suite does not name")
    verdict = check_results.check_suite(repo, TABLE)
    assert (verdict.script, verdict.status, verdict.changed) == ("benchmarks/suites/s.yaml", "fresh", ())
    for path in ("configs/data/heart.yaml", "configs/fedrep/x.yaml", "src/fedhet/plugins/rounds/trainer.py"):
        before = (repo / path).read_text()
        _commit(repo, {path: before + "# changed\n"}, f"change {path}")
        verdict = check_results.check_suite(repo, TABLE)
        assert (verdict.status, verdict.changed) == ("stale", (path,))
        _commit(repo, {path: before}, "revert")  # content, not history, decides
        assert check_results.check_suite(repo, TABLE).status == "fresh"
    _commit(repo, {"benchmarks/suites/s.yaml": SUITE.replace("seeds: [0]", "seeds: [0, 1]")}, "more seeds")
    assert check_results.check_suite(repo, TABLE).changed == ("benchmarks/suites/s.yaml",)


def test_a_method_added_to_the_suite_makes_it_stale(suite_repo: tuple[Path, str]) -> None:
    """A method added to the suite (its config unchanged since the results) changes the suite file: stale."""
    repo, _ = suite_repo
    added = SUITE.replace("seeds: [0]", "  fedper: {config: ../../configs/fedper/x.yaml}\nseeds: [0]")
    _commit(repo, {"benchmarks/suites/s.yaml": added}, "a method more")
    assert check_results.suite_paths(repo, "benchmarks/suites/s.yaml") == (
        "benchmarks/suites/s.yaml",
        "configs/data/heart.yaml",
        "configs/fedavg/x.yaml",
        "configs/fedper/x.yaml",
        "configs/fedrep/x.yaml",
        "src/fedhet",
    )
    assert check_results.check_suite(repo, TABLE).changed == ("benchmarks/suites/s.yaml",)


@pytest.mark.parametrize(
    ("commit", "text", "status"),
    [
        ("0123456789abcdef0123456789abcdef01234567", None, "unknown"),  # a commit this repository does not hold
        ("{measured}+dirty", None, "dirty"),  # written with uncommitted changes
        ("{measured}", "# Suite s\n\n- commit: `{measured}`\n", "unknown"),  # names no suite, no configs' sha256
    ],
)
def test_unverifiable_suite_results_are_flagged(
    suite_repo: tuple[Path, str], commit: str, text: str | None, status: str
) -> None:
    repo, measured = suite_repo
    table = _suite_table(commit.format(measured=measured)) if text is None else text.format(measured=measured)
    _commit(repo, {str(TABLE): table}, "results")
    assert check_results.check_suite(repo, TABLE).status == status


def test_check_all_lists_suite_results_beside_the_files(suite_repo: tuple[Path, str]) -> None:
    repo, measured = suite_repo
    _commit(repo, {"benchmarks/results/scale.md": _results(measured)}, "a script's results")
    verdicts = {v.results: v.status for v in check_results.check_all(repo)}
    assert verdicts == {"benchmarks/results/scale.md": "fresh", str(TABLE): "fresh"}
