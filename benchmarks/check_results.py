"""Flag results files older than the code they measure.

Every results file in ``benchmarks/results/`` ends with the footer ``_common.environment`` writes, which names the
command (``python benchmarks/<script>.py ...``) and the commit it ran at. A result is **stale** when the code it
measures differs between that commit and the commit checked against (``HEAD`` by default): the script itself,
``benchmarks/_common.py`` and the library paths of :data:`MEASURED` (by default all of ``src/fedhet``). Content is
compared (``git diff --quiet <recorded> <against> -- <paths>``), not history, so a result measured on a branch whose
commits were later rebased onto ``main`` stays fresh as long as the code it measured is unchanged. A result is also
flagged when its footer names no commit, a commit this repository does not hold, or one measured with uncommitted
changes to the measured paths (``<hash>-dirty``).

A suite's results folder (``benchmarks/results/suites/<name>/``, written by ``fedhet compare``) is judged run by run
from its raw results (``runs.jsonl`` and ``sources.json``, :mod:`fedhet.experiments.raw`), which record what each run
imported and read with its sha256: the fedhet modules (the method's module, its callbacks and maths, the engine, the
data module), the user code its configs name by ``class_path``, its config files (and those they name) and the data
files its datasets read. A run is **stale** only when one of those files differs at the commit checked against
(content, not history: a file is compared by its sha256, so a run made with uncommitted changes is judged as well), or
when the suite file no longer holds its federation, method or seed, or gives its method other fixed overrides or
another config; a change anywhere else under ``src/fedhet`` leaves it fresh. A table is stale when one of its runs
is, **unverifiable** when a run recorded no sources (a fedhet before the run record) or read a file outside the
repository that ``benchmarks/external_data.yaml`` does not pin (a pinned one counts when the run read exactly the
pinned bytes, and makes the run stale when it read others), and **no raw results** when its folder holds no
``runs.jsonl`` (a table from before raw results were kept: regenerate it with ``fedhet compare``). A changed search
space or tuning budget is not seen here (``fedhet compare`` tunes again in a new study and runs the method again).

Usage::

    python benchmarks/check_results.py             # a table of every results file; exit status 1 if any is stale
    python benchmarks/check_results.py --against main --no-fail

Nothing is regenerated; the table says which script (or ``fedhet compare -c <suite>``) to re-run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
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
    "stacked_cnn_step": ("src/fedhet/modules/image_cnns.py", "src/fedhet/functional/stacking.py"),
    "stacked_methods": ("src/fedhet", "benchmarks/_fedpac_recipes.py"),  # --fedpac-scale: those recipes
    "fedpac_qp": ("src/fedhet", "benchmarks/_fedpac_recipes.py"),
    "heap_retention": ("src/fedhet", "benchmarks/engine_overhead.py"),  # its workloads
    "privacy_clip_norms": (
        "src/fedhet",
        "configs/fedavg/digits.yaml",
        "configs/fedrep/digits.yaml",
        "benchmarks/suites/privacy_digits.yaml",
        "benchmarks/suites/privacy_digits_50.yaml",
    ),
}
"""Library paths a script's results depend on, where narrower than ``src/fedhet`` (scripts not listed: all of it)."""
DEFAULT_MEASURED = ("src/fedhet",)
_COMMAND = re.compile(r"python (?:benchmarks/)?([\w/]+)\.py|benchmarks/([\w/]+)\.py")  # the first script named
_COMMIT = re.compile(r"^- commit: `([^`]*)`", re.MULTILINE)
_SUITE = re.compile(r"^- suite: `([^`]*)`", re.MULTILINE)
SUITE_TABLES = "suites/*/table.md"
"""A suite's results (``fedhet compare``), under ``benchmarks/results/``."""
RUNS_FILE, SOURCES_FILE = "runs.jsonl", "sources.json"
OUTSIDE = "<outside>"  # a file a run read outside any work tree (fedhet.core.provenance.repo_label)
PINS = "benchmarks/external_data.yaml"
"""The sha256 of the data files suites read from outside the repository (MNIST-5k, Fashion-MNIST), by file name."""


@dataclass(frozen=True)
class Verdict:
    """What the check says about one results file."""

    results: str
    script: str  # the script, or a suite's results: the suite file
    commit: str
    status: str  # "fresh", "stale", "unknown" (no command or commit, or a commit git does not hold), "dirty",
    # for a suite also "unverifiable" (a run recorded no sources, or read a file outside the repository) and
    # "no raw results"
    changed: tuple[str, ...] = ()  # stale: the measured files that differ
    stale_runs: tuple[str, ...] = ()  # a suite's stale runs ("<method> on <federation> seed <s>")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)


def measured_paths(script: str) -> tuple[str, ...]:
    """The repository paths whose content a script's results depend on."""
    return (f"benchmarks/{script}.py", "benchmarks/_common.py", *MEASURED.get(script, DEFAULT_MEASURED))


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


class _Contents:
    """The sha256 of files at one commit, each read once (``None``: the commit holds no such file), and its pins."""

    def __init__(self, root: Path, against: str) -> None:
        self.root, self.against = root, against
        self._known: dict[str, str | None] = {}
        self.pins = external_pins(root, against)

    def sha256(self, path: str) -> str | None:
        if path not in self._known:
            shown = subprocess.run(["git", "show", f"{self.against}:{path}"], cwd=self.root, capture_output=True)
            self._known[path] = hashlib.sha256(shown.stdout).hexdigest() if shown.returncode == 0 else None
        return self._known[path]


def external_pins(root: Path, against: str = "HEAD") -> dict[str, str]:
    """File name -> sha256 of the outside data files :data:`PINS` pins at ``against`` (empty without the file).

    Raises:
        ValueError: when the file is not a mapping of names to entries with a 64-digit hex ``sha256``.

    """
    shown = _git(root, "show", f"{against}:{PINS}")
    raw = yaml.safe_load(shown.stdout) if shown.returncode == 0 else {}
    pins: dict[str, str] = {}
    for name, entry in (raw or {}).items() if isinstance(raw, dict) else [(PINS, None)]:
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"{PINS}: {name}: expected a mapping with a 64-digit hex `sha256`")
        pins[str(name)] = digest
    return pins


def _module_paths(module: str) -> tuple[str, str]:
    """Where a fedhet module's source lives in the repository: a file, or a package's ``__init__.py``."""
    base = "src/" + module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def _suite_entry(root: Path, suite: str, against: str) -> dict[str, object]:
    """The suite file as ``against`` holds it (empty when it holds none or it is not a mapping)."""
    shown = _git(root, "show", f"{against}:{suite}")
    raw = yaml.safe_load(shown.stdout) if shown.returncode == 0 else None
    return raw if isinstance(raw, dict) else {}


def _changed_inputs(row: dict[str, object], sources: dict[str, str], files: _Contents) -> tuple[list[str], list[str]]:
    """The files a run imported or read that differ at the commit checked against, and those it cannot judge."""
    changed, unverifiable = [], []
    for module, digest in sources.items():
        if module.split(".")[0] != "fedhet":
            continue  # user modules are judged from the run's user code, file by file
        found = [path for path in _module_paths(module) if files.sha256(path) is not None]
        if not found:
            changed.append(f"{_module_paths(module)[0]} (removed)")
        elif files.sha256(found[0]) != digest:
            changed.append(found[0])
    for field in ("config_files", "data_files", "user_code"):
        recorded = row.get(field) or {}
        for label, digest in recorded.items() if isinstance(recorded, dict) else ():
            if label.startswith(OUTSIDE):
                pinned = files.pins.get(posixpath.basename(label))
                if pinned is None:
                    unverifiable.append(label)
                elif pinned != digest:
                    changed.append(f"{label} (not the bytes {PINS} pins)")
                continue
            found = [path for path in (label, f"src/{label}") if files.sha256(path) is not None]
            if not found or files.sha256(found[0]) != digest:
                changed.append(label if found else f"{label} (removed)")
    return changed, unverifiable


def _suite_changes(row: dict[str, object], suite: str, entry: dict[str, object]) -> list[str]:
    """How the suite file no longer describes a run: its federation, method or seed gone, other overrides or config."""
    methods = entry.get("methods") if isinstance(entry.get("methods"), dict) else {}
    federations = entry.get("federations") if isinstance(entry.get("federations"), dict) else {}
    seeds = entry.get("seeds") if isinstance(entry.get("seeds"), list) else []
    method = methods.get(row["method"]) if isinstance(methods, dict) else None
    if not isinstance(method, dict) or row["federation"] not in federations or row["seed"] not in seeds:
        return [f"{suite} (no longer runs it)"]
    tuned = row.get("tuned") if isinstance(row.get("tuned"), dict) else {}
    overrides = row.get("overrides") if isinstance(row.get("overrides"), dict) else {}
    fixed = {k: v for k, v in overrides.items() if k not in tuned}
    if json.dumps(method.get("overrides") or {}, sort_keys=True) != json.dumps(fixed, sort_keys=True):
        return [f"{suite} ({row['method']}'s overrides)"]
    folder = posixpath.dirname(suite)
    named = [method.get("config"), federations.get(row["federation"])]
    configs = row.get("config_files") if isinstance(row.get("config_files"), dict) else {}
    for path in (posixpath.normpath(posixpath.join(folder, p)) for p in named if isinstance(p, str) and p):
        if path not in configs:
            return [f"{suite} ({row['method']} on {row['federation']} names {path})"]
    return []


def check_suite(root: Path, table: Path, against: str = "HEAD") -> Verdict:
    """The verdict on a suite's results folder, run by run from its raw results (``table`` relative to ``root``).

    Args:
        root: the repository's root.
        table: the suite's ``table.md``, relative to ``root``.
        against: the commit whose files the results should describe.

    """
    text = (root / table).read_text()
    suite_match, commit_match = _SUITE.search(text), _COMMIT.search(text)
    suite = suite_match.group(1) if suite_match else "?"
    commit = commit_match.group(1) if commit_match else ""
    folder = root / table.parent
    if not (folder / RUNS_FILE).is_file():
        return Verdict(str(table), suite, commit, "no raw results")
    rows = [json.loads(line) for line in (folder / RUNS_FILE).read_text().splitlines() if line.strip()]
    sources = json.loads((folder / SOURCES_FILE).read_text()) if (folder / SOURCES_FILE).is_file() else {}
    commits = sorted({str(row.get("commit")) for row in rows})
    commit = commits[0] if len(commits) == 1 else f"mixed ({len(commits)})"
    files, entry = _Contents(root, against), _suite_entry(root, suite, against)
    changed: dict[str, None] = {}
    stale, unverifiable = [], False
    for row in rows:
        recorded = sources.get(str(row.get("sources_sha256")))
        if not isinstance(recorded, dict) or not row.get("config_files"):
            unverifiable = True
            continue
        differ, unknown = _changed_inputs(row, recorded, files)
        differ += _suite_changes(row, suite, entry)
        unverifiable = unverifiable or bool(unknown)
        if differ:
            stale.append(f"{row['method']} on {row['federation']} seed {row['seed']}")
            changed.update(dict.fromkeys(differ))
    status = "stale" if stale else "unverifiable" if unverifiable else "fresh"
    return Verdict(str(table), suite, commit, status, tuple(changed), tuple(stale))


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
        if v.stale_runs:
            changed = f"{len(v.stale_runs)} runs: {changed}"
        print(f"| {Path(v.results).relative_to(RESULTS)} | {v.script} | {v.commit} | {v.status} | {changed} |")
    bad = [v for v in verdicts if v.status != "fresh"]
    counts = {status: sum(v.status == status for v in verdicts) for status in dict.fromkeys(v.status for v in bad)}
    detail = ", ".join(f"{n} {status}" for status, n in counts.items())
    print(f"\n{len(verdicts) - len(bad)} fresh, {len(bad)} not ({detail or 'none'})", file=sys.stderr)
    return 0 if args.no_fail or not bad else 1


if __name__ == "__main__":
    sys.exit(main())
