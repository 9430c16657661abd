"""Flag results files older than the code they measure.

Every results file in ``benchmarks/results/`` ends with the footer ``_common.environment`` writes, which names the
command (``python benchmarks/<script>.py ...``) and the commit it ran at. A result is **stale** when the code it
measures differs between that commit and the commit checked against (``HEAD`` by default): the script itself,
``benchmarks/_common.py`` and the library paths of :data:`MEASURED` (by default all of ``src/fedhet``). Content is
compared (``git diff --quiet <recorded> <against> -- <paths>``), not history, so a result measured on a branch whose
commits were later rebased onto ``main`` stays fresh as long as the code it measured is unchanged. A result is also
flagged when its footer names no commit, a commit this repository does not hold, or one measured with uncommitted
changes to the measured paths (``<hash>-dirty``).

Usage::

    python benchmarks/check_results.py             # a table of every results file; exit status 1 if any is stale
    python benchmarks/check_results.py --against main --no-fail

Nothing is regenerated; the table says which script to re-run.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("benchmarks/results")
MEASURED: dict[str, tuple[str, ...]] = {
    "engine_overhead": ("src/fedhet/plugins", "src/fedhet/datamodules", "src/fedhet/modules"),
    "engine_overhead_ablation": ("src/fedhet/plugins", "src/fedhet/datamodules", "src/fedhet/modules"),
    "engine_overhead_profile": ("src/fedhet/plugins", "src/fedhet/datamodules", "src/fedhet/modules"),
    "describe_federations": ("src/fedhet/datamodules", "configs"),
    "collective_latency": ("src/fedhet/plugins/shared_memory.py",),
    "stacked_cnn_step": ("src/fedhet/modules/fedpac_nets.py", "src/fedhet/functional/stacking.py"),
    "stacked_methods": ("src/fedhet", "benchmarks/fedpac_reproduce.py"),  # --fedpac-scale: that script's recipes
    "heap_retention": ("src/fedhet", "benchmarks/engine_overhead.py"),  # its workloads
}
"""Library paths a script's results depend on, where narrower than ``src/fedhet`` (scripts not listed: all of it)."""
DEFAULT_MEASURED = ("src/fedhet",)
_COMMAND = re.compile(r"python (?:benchmarks/)?([\w/]+)\.py|benchmarks/([\w/]+)\.py")  # the first script named
_COMMIT = re.compile(r"^- commit: `([^`]*)`", re.MULTILINE)


@dataclass(frozen=True)
class Verdict:
    """What the check says about one results file."""

    results: str
    script: str
    commit: str
    status: str  # "fresh", "stale", "unknown" (no command or commit, or a commit git does not hold) or "dirty"
    changed: tuple[str, ...] = ()  # stale: the measured files that differ


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def measured_paths(script: str) -> tuple[str, ...]:
    """The repository paths whose content a script's results depend on."""
    return (f"benchmarks/{script}.py", "benchmarks/_common.py", *MEASURED.get(script, DEFAULT_MEASURED))


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
    recorded = commit.group(1)
    if recorded.endswith("-dirty"):
        return Verdict(str(results), script, recorded, "dirty")
    if _git(root, "cat-file", "-e", f"{recorded}^{{commit}}").returncode != 0:
        return Verdict(str(results), script, recorded, "unknown")
    paths = [p for p in measured_paths(script) if (root / p).exists()]
    diff = _git(root, "diff", "--name-only", recorded, against, "--", *paths)
    if diff.returncode != 0:
        raise RuntimeError(f"git diff {recorded} {against} failed: {diff.stderr.strip()}")
    changed = tuple(diff.stdout.split())
    return Verdict(str(results), script, recorded, "stale" if changed else "fresh", changed)


def check_all(root: Path = ROOT, against: str = "HEAD") -> list[Verdict]:
    """Verdicts on every Markdown file under ``benchmarks/results/`` (CSV files share their Markdown's footer)."""
    return [check_file(root, path.relative_to(root), against) for path in sorted((root / RESULTS).glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the commit the results should describe")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when some results are stale")
    args = parser.parse_args(argv)
    verdicts = check_all(ROOT, args.against)
    print("| results | script | commit | status | measured files changed since |")
    print("|---|---|---|---|---|")
    for v in verdicts:
        changed = ", ".join(v.changed[:3]) + (f" (+{len(v.changed) - 3})" if len(v.changed) > 3 else "")
        print(f"| {Path(v.results).name} | {v.script} | {v.commit} | {v.status} | {changed} |")
    bad = [v for v in verdicts if v.status != "fresh"]
    print(f"\n{len(verdicts) - len(bad)} fresh, {len(bad)} stale or unverifiable", file=sys.stderr)
    return 0 if args.no_fail or not bad else 1


if __name__ == "__main__":
    sys.exit(main())
