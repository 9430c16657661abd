"""Flag results files older than the code they measure.

Every results file in ``benchmarks/results/`` ends with the footer ``_common.environment`` writes, which names the
command (``python benchmarks/<script>.py ...``) and the commit it ran at. A result is **stale** when the code it
measures differs between that commit and the commit checked against (``HEAD`` by default): the script itself,
``benchmarks/_common.py`` and the library paths of :data:`MEASURED` (by default all of ``src/fedhet``). Content is
compared (``git diff --quiet <recorded> <against> -- <paths>``), not history, so a result measured on a branch whose
commits were later rebased onto ``main`` stays fresh as long as the code it measured is unchanged. A result is also
flagged when its footer names no commit, a commit this repository does not hold, or one measured with uncommitted
changes to the measured paths (``<hash>-dirty``).

A suite's results folder (``benchmarks/results/suites/<name>/``, written by ``fedhet compare``) is checked the same
way from its ``table.md``, which names the suite file, the commit and the sha256 of the runs' resolved configs: it is
stale when the suite file, a config it names (the methods' configs, the federations' data configs, as the suite file
at the commit checked against names them) or ``src/fedhet`` differs, and flagged when it names no suite, no configs'
sha256 or an unknown commit, or was written with uncommitted changes (``<hash>+dirty``).

Usage::

    python benchmarks/check_results.py             # a table of every results file; exit status 1 if any is stale
    python benchmarks/check_results.py --against main --no-fail

Nothing is regenerated; the table says which script (or ``fedhet compare -c <suite>``) to re-run.
"""

from __future__ import annotations

import argparse
import posixpath
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("benchmarks/results")
MEASURED: dict[str, tuple[str, ...]] = {
    "engine_overhead": ("src/fedhet/plugins", "src/fedhet/datamodules", "src/fedhet/modules"),
    "engine_overhead_ablation": ("src/fedhet/plugins", "src/fedhet/datamodules", "src/fedhet/modules"),
    "engine_overhead_profile": ("src/fedhet/plugins", "src/fedhet/datamodules", "src/fedhet/modules"),
    "describe_federations": ("src/fedhet/datamodules", "configs"),
    "collective_latency": ("src/fedhet/plugins/processes/shared_memory.py",),
    "stacked_cnn_step": ("src/fedhet/modules/fedpac_nets.py", "src/fedhet/functional/stacking.py"),
    "stacked_methods": ("src/fedhet", "benchmarks/_fedpac_recipes.py"),  # --fedpac-scale: those recipes
    "fedpac_qp": ("src/fedhet", "benchmarks/_fedpac_recipes.py"),
    "heap_retention": ("src/fedhet", "benchmarks/engine_overhead.py"),  # its workloads
}
"""Library paths a script's results depend on, where narrower than ``src/fedhet`` (scripts not listed: all of it)."""
DEFAULT_MEASURED = ("src/fedhet",)
_COMMAND = re.compile(r"python (?:benchmarks/)?([\w/]+)\.py|benchmarks/([\w/]+)\.py")  # the first script named
_COMMIT = re.compile(r"^- commit: `([^`]*)`", re.MULTILINE)
_SUITE = re.compile(r"^- suite: `([^`]*)`", re.MULTILINE)
_CONFIGS_SHA = re.compile(r"^- configs_sha256: `[0-9a-f]{64}`", re.MULTILINE)
SUITE_TABLES = "suites/*/table.md"
"""A suite's results (``fedhet compare``), under ``benchmarks/results/``."""


@dataclass(frozen=True)
class Verdict:
    """What the check says about one results file."""

    results: str
    script: str  # the script, or a suite's results: the suite file
    commit: str
    status: str  # "fresh", "stale", "unknown" (no command or commit, or a commit git does not hold) or "dirty"
    changed: tuple[str, ...] = ()  # stale: the measured files that differ


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def measured_paths(script: str) -> tuple[str, ...]:
    """The repository paths whose content a script's results depend on."""
    return (f"benchmarks/{script}.py", "benchmarks/_common.py", *MEASURED.get(script, DEFAULT_MEASURED))


def suite_paths(root: Path, suite: str, against: str = "HEAD") -> tuple[str, ...]:
    """The repository paths a suite's results depend on: the suite file, the configs it names, ``src/fedhet``.

    Args:
        root: the repository's root.
        suite: the suite file, relative to ``root``.
        against: the commit whose suite file is read (a suite file it does not hold names no config).

    """
    shown = _git(root, "show", f"{against}:{suite}")
    raw = yaml.safe_load(shown.stdout) if shown.returncode == 0 else None
    raw = raw if isinstance(raw, dict) else {}
    methods = raw.get("methods") if isinstance(raw.get("methods"), dict) else {}
    federations = raw.get("federations") if isinstance(raw.get("federations"), dict) else {}
    named = [m.get("config") for m in methods.values() if isinstance(m, dict)] + list(federations.values())
    folder = posixpath.dirname(suite)
    configs = sorted({posixpath.normpath(posixpath.join(folder, p)) for p in named if isinstance(p, str) and p})
    return (suite, *configs, *DEFAULT_MEASURED)


def _verdict(root: Path, results: Path, script: str, recorded: str, paths: list[str], against: str) -> Verdict:
    """Dirty, unknown, or fresh unless ``paths`` differ between the ``recorded`` commit and ``against``."""
    if recorded.endswith(("-dirty", "+dirty")):
        return Verdict(str(results), script, recorded, "dirty")
    if _git(root, "cat-file", "-e", f"{recorded}^{{commit}}").returncode != 0:
        return Verdict(str(results), script, recorded, "unknown")
    diff = _git(root, "diff", "--name-only", recorded, against, "--", *paths)
    if diff.returncode != 0:
        raise RuntimeError(f"git diff {recorded} {against} failed: {diff.stderr.strip()}")
    changed = tuple(diff.stdout.split())
    return Verdict(str(results), script, recorded, "stale" if changed else "fresh", changed)


def check_file(root: Path, results: Path, against: str = "HEAD") -> Verdict:
    """The verdict on one Markdown results file (``results`` relative to ``root``).

    Args:
        root: the repository's root.
        results: the results file, relative to ``root``.
        against: the commit whose code the results should describe.

    """
    text = (root / results).read_text()
    command, commit = _COMMAND.search(text), _COMMIT.search(text)
    script = (command.group(1) or command.group(2)) if command else "?"
    if command is None or commit is None:
        return Verdict(str(results), script, commit.group(1) if commit else "", "unknown")
    paths = [p for p in measured_paths(script) if (root / p).exists()]
    return _verdict(root, results, script, commit.group(1), paths, against)


def check_suite(root: Path, table: Path, against: str = "HEAD") -> Verdict:
    """The verdict on a suite's results folder, from its ``table.md`` (``table`` relative to ``root``).

    Args:
        root: the repository's root.
        table: the suite's ``table.md``, relative to ``root``.
        against: the commit whose suite file, configs and library the results should describe.

    """
    text = (root / table).read_text()
    suite, commit = _SUITE.search(text), _COMMIT.search(text)
    name = suite.group(1) if suite else "?"
    if suite is None or commit is None or _CONFIGS_SHA.search(text) is None:
        return Verdict(str(table), name, commit.group(1) if commit else "", "unknown")
    return _verdict(root, table, name, commit.group(1), list(suite_paths(root, name, against)), against)


def check_all(root: Path = ROOT, against: str = "HEAD") -> list[Verdict]:
    """Verdicts on every Markdown file under ``benchmarks/results/`` and every suite's results folder.

    CSV files share their Markdown's footer; a suite's folder is judged from its ``table.md`` (:func:`check_suite`).
    """
    folder = root / RESULTS
    files = [check_file(root, path.relative_to(root), against) for path in sorted(folder.glob("*.md"))]
    suites = [check_suite(root, path.relative_to(root), against) for path in sorted(folder.glob(SUITE_TABLES))]
    return files + suites


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the commit the results should describe")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when some results are stale")
    args = parser.parse_args(argv)
    verdicts = check_all(ROOT, args.against)
    print("| results | script or suite | commit | status | measured files changed since |")
    print("|---|---|---|---|---|")
    for v in verdicts:
        changed = ", ".join(v.changed[:3]) + (f" (+{len(v.changed) - 3})" if len(v.changed) > 3 else "")
        print(f"| {Path(v.results).relative_to(RESULTS)} | {v.script} | {v.commit} | {v.status} | {changed} |")
    bad = [v for v in verdicts if v.status != "fresh"]
    print(f"\n{len(verdicts) - len(bad)} fresh, {len(bad)} stale or unverifiable", file=sys.stderr)
    return 0 if args.no_fail or not bad else 1


if __name__ == "__main__":
    sys.exit(main())
