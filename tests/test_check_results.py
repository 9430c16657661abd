"""benchmarks/check_results.py: a results file is stale exactly when the code it measures changed since its commit."""

from __future__ import annotations

import hashlib
import importlib.util
import json
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
federations: {heart: ../../configs/data/heart.yaml}
methods:
  fedavg: {config: ../../configs/fedavg/x.yaml}
  fedrep: {config: ../../configs/fedrep/x.yaml, overrides: {trainer.rounds: 2}}
seeds: [0, 1]
few_seeds: a test fixture
baseline: fedavg
"""
FOLDER = Path("benchmarks/results/suites/s")
TABLE = FOLDER / "table.md"
HEART = "src/fedhet/datamodules/datasets/data/heart.csv"  # an installed copy names it from the package's folder
CODE = {  # module -> file, as a run records the modules it imported (not src/fedhet/unused.py)
    "fedhet": "src/fedhet/__init__.py",
    "fedhet.modules.fedrep": "src/fedhet/modules/fedrep.py",
    "fedhet.plugins.rounds": "src/fedhet/plugins/rounds/__init__.py",
}
FILES = {
    **{path: f"# {path}\n" for path in CODE.values()},
    "src/fedhet/unused.py": "x = 1\n",
    HEART: "a,b\n1,2\n",
    "mydata/sites.py": "x = 1\n",
    **{f"configs/{name}": "a: 1\n" for name in ("data/heart.yaml", "fedavg/x.yaml", "fedrep/x.yaml", "fedrep/y.yaml")},
    "benchmarks/suites/s.yaml": SUITE,
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _run(method: str, seed: int, **more: object) -> dict[str, object]:
    configs = [f"configs/{method}/x.yaml", "configs/data/heart.yaml"]
    return {
        "federation": "heart",
        "method": method,
        "seed": seed,
        "tuned": {"model.init_args.lr": 0.1} if method == "fedrep" else {},
        "overrides": {"trainer.rounds": 2, "model.init_args.lr": 0.1} if method == "fedrep" else {},
        "commit": "c0ffee",
        "sources_sha256": "s1",
        "config_files": {path: _sha(FILES[path]) for path in configs},
        "data_files": {
            "fedhet/datamodules/datasets/data/heart.csv": _sha(FILES["src/fedhet/datamodules/datasets/data/heart.csv"])
        },
        "user_code": {"mydata/sites.py": _sha(FILES["mydata/sites.py"])},
        **more,
    }


def _write_results(repo: Path, rows: list[dict[str, object]], sources: dict[str, object] | None = None) -> None:
    files = {
        str(TABLE): "# Suite s\n\n- suite: `benchmarks/suites/s.yaml`\n- commit: `c0ffee`\n",
        str(FOLDER / "runs.jsonl"): "".join(json.dumps(row) + "\n" for row in rows),
        str(FOLDER / "sources.json"): json.dumps(
            {"s1": {module: _sha(FILES[path]) for module, path in CODE.items()}} if sources is None else sources
        ),
    }
    _commit(repo, files, "results")


@pytest.fixture
def suite_repo(repo: Path) -> Path:
    """``repo`` with a suite, the code and files its runs imported and read, and raw results of its four runs."""
    _commit(repo, FILES, "suite")
    _write_results(repo, [_run(m, s) for m in ("fedavg", "fedrep") for s in (0, 1)])
    return repo


def test_a_suite_run_is_stale_only_when_a_file_it_imported_or_read_changed(suite_repo: Path) -> None:
    repo = suite_repo
    verdict = check_results.check_suite(repo, TABLE)
    assert (verdict.script, verdict.commit, verdict.status, verdict.changed) == (
        "benchmarks/suites/s.yaml", "c0ffee", "fresh", ()
    )  # fmt: skip
    _commit(repo, {"src/fedhet/unused.py": "x = 2\n", "configs/fedrep/y.yaml": "a: 2\n"}, "code no run imported")
    assert check_results.check_suite(repo, TABLE).status == "fresh"  # not any change under src/fedhet
    for path, label in [
        ("src/fedhet/modules/fedrep.py", "src/fedhet/modules/fedrep.py"),  # a module the runs imported
        ("configs/data/heart.yaml", "configs/data/heart.yaml"),  # a config they read
        ("src/fedhet/datamodules/datasets/data/heart.csv", "fedhet/datamodules/datasets/data/heart.csv"),  # data
        ("mydata/sites.py", "mydata/sites.py"),  # user code a config names by class_path
    ]:
        before = (repo / path).read_text()
        _commit(repo, {path: before + "# changed\n"}, f"change {path}")
        verdict = check_results.check_suite(repo, TABLE)
        assert (verdict.status, verdict.changed) == ("stale", (label,))
        assert len(verdict.stale_runs) == 4
        _commit(repo, {path: before}, "revert")  # content, not history, decides
        assert check_results.check_suite(repo, TABLE).status == "fresh"
    _commit(repo, {"configs/fedrep/x.yaml": "a: 3\n"}, "fedrep's config only")
    verdict = check_results.check_suite(repo, TABLE)
    assert verdict.stale_runs == ("fedrep on heart seed 0", "fedrep on heart seed 1")


def test_a_suite_that_no_longer_describes_a_run_makes_it_stale(suite_repo: Path) -> None:
    repo = suite_repo
    _commit(repo, {"benchmarks/suites/s.yaml": SUITE.replace("seeds: [0, 1]", "seeds: [0, 1, 2]")}, "a seed more")
    assert check_results.check_suite(repo, TABLE).status == "fresh"  # the table covers fewer runs, none is stale
    for edit, why in [
        (SUITE.replace("seeds: [0, 1]", "seeds: [0]"), "no longer runs it"),
        (SUITE.replace("trainer.rounds: 2", "trainer.rounds: 3"), "fedrep's overrides"),
        (SUITE.replace("fedrep/x.yaml", "fedrep/y.yaml"), "names configs/fedrep/y.yaml"),
    ]:
        _commit(repo, {"benchmarks/suites/s.yaml": edit}, why)
        verdict = check_results.check_suite(repo, TABLE)
        assert verdict.status == "stale"
        assert why in verdict.changed[0]
        _commit(repo, {"benchmarks/suites/s.yaml": SUITE}, "revert")


def test_a_module_that_is_gone_makes_its_runs_stale(suite_repo: Path) -> None:
    _git(suite_repo, "rm", "-q", "src/fedhet/modules/fedrep.py")
    _git(suite_repo, "commit", "-q", "-m", "moved away")
    assert check_results.check_suite(suite_repo, TABLE).changed == ("src/fedhet/modules/fedrep.py (removed)",)


def test_tables_without_raw_results_or_sources_say_so(suite_repo: Path) -> None:
    repo = suite_repo
    _write_results(repo, [_run("fedavg", 0), _run("fedavg", 1, sources_sha256=None)])  # a run of an older fedhet
    assert check_results.check_suite(repo, TABLE).status == "unverifiable"
    outside = _run("fedavg", 0, data_files={"<outside>/covtype.data.gz": "ab" * 32})
    _write_results(repo, [outside])
    assert check_results.check_suite(repo, TABLE).status == "unverifiable"
    _git(repo, "rm", "-q", str(FOLDER / "runs.jsonl"))
    _git(repo, "commit", "-q", "-m", "a table from before raw results")
    (verdict,) = [v for v in check_results.check_all(repo) if v.results == str(TABLE)]
    assert (verdict.status, verdict.commit) == ("no raw results", "c0ffee")


def test_outside_data_counts_when_it_is_the_pinned_bytes(suite_repo: Path) -> None:
    repo, digest = suite_repo, "ab" * 32
    _write_results(repo, [_run("fedavg", 0, data_files={"<outside>/mnist_5k.csv.gz": digest})])
    assert check_results.check_suite(repo, TABLE).status == "unverifiable"  # no pin yet
    _commit(repo, {check_results.PINS: f"mnist_5k.csv.gz:\n  sha256: {digest}\n  where: a package\n"}, "pin")
    assert check_results.check_suite(repo, TABLE).status == "fresh"
    _commit(repo, {check_results.PINS: f"mnist_5k.csv.gz:\n  sha256: {'cd' * 32}\n"}, "other bytes pinned")
    verdict = check_results.check_suite(repo, TABLE)
    assert (verdict.status, verdict.changed) == (
        "stale",
        (f"<outside>/mnist_5k.csv.gz (not the bytes {check_results.PINS} pins)",),
    )
    _commit(repo, {check_results.PINS: "mnist_5k.csv.gz:\n  sha256: abc\n"}, "a broken pin")
    with pytest.raises(ValueError, match="mnist_5k.csv.gz: expected a mapping with a 64-digit hex `sha256`"):
        check_results.check_suite(repo, TABLE)


def _installed_copies() -> list[tuple[str, Path | None]]:
    """Each pinned file and where this machine has it (``None``: not installed here)."""
    from fedhet.datamodules.datasets import fashion_mnist_dir
    from fedhet.datamodules.datasets.mnist import mnist5k_path

    try:
        fashion: Path | None = fashion_mnist_dir()
    except FileNotFoundError:
        fashion = None
    try:
        mnist: Path | None = mnist5k_path()
    except (ModuleNotFoundError, FileNotFoundError):
        mnist = None
    root = Path(__file__).resolve().parent.parent
    names = check_results.external_pins(root)
    return [(n, mnist if n == "mnist_5k.csv.gz" else fashion / n if fashion else None) for n in sorted(names)]


@pytest.mark.parametrize(("name", "path"), _installed_copies(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_pins_are_the_bytes_this_machine_installs(name: str, path: Path | None) -> None:
    if path is None:
        pytest.skip(f"{name} is not installed here (benchmarks/external_data.yaml says where it comes from)")
    pinned = check_results.external_pins(Path(__file__).resolve().parent.parent)[name]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == pinned, f"{path} is not the file the tables read"


def test_check_all_lists_suite_results_beside_the_files(suite_repo: Path) -> None:
    repo = suite_repo
    measured = _git(repo, "rev-parse", "HEAD")
    _commit(repo, {"benchmarks/results/scale.md": _results(measured)}, "a script's results")
    verdicts = {v.results: v.status for v in check_results.check_all(repo)}
    assert verdicts == {"benchmarks/results/scale.md": "fresh", str(TABLE): "fresh"}
