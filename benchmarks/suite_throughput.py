"""CPU of a whole ``fedhet compare`` suite, tuning included, before and after a change, interleaved on one machine.

Each variant is a source tree: ``before`` the repository at ``--before`` (``git archive``, default ``9390786``: every
run a fresh process), ``after`` this checkout. Each runs ``fedhet compare`` on its own copy of the suite file (by
default ``benchmarks/suites/csv_heart_sites.yaml``: 45 short runs, 5 methods tuned with 6 trials each, then 3 seeds),
its output in a temporary folder, alternating before / after ``--repeats`` times. The CPU seconds are those of the
whole process tree (user + system of ``fedhet compare`` and every process beneath it, the runs, the fork server and
the command-line check included; this script adopts orphaned descendants as a subreaper, Linux only, so none is
missed). The per-run overhead is everything outside the rounds and the evaluations, per run and tuning trial:
(suite CPU - the runs' round and evaluation CPU) / runs, the rounds' and evaluations' CPU read from the runs' records
(``record.json``) of the ``after`` tree; the runs compute the same numbers in both trees, so the same figure serves
``before``, whose code may record none. Targets (issue 41): suite CPU after <= 0.4x before, per-run overhead <= 0.5 CPU
s. Writes ``results/suite_throughput.md`` with the commands and the machine's load (take figures on a quiet machine).
``--seeds N`` and ``--trials N`` make a smaller suite (a check that the script runs).
``python benchmarks/suite_throughput.py [--before REF] [--repeats 1] [--suite FILE] [--seeds N] [--trials N]``
"""

from __future__ import annotations

import argparse
import ctypes
import io
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import yaml

from _common import RESULTS_DIR, current_commit
from fedhet.plugins.storage.run_record import read_records

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "suites" / "csv_heart_sites.yaml"
_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans() -> None:
    """Make this process the reaper of its orphaned descendants (the fork server outlives ``fedhet compare``)."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _tree(ref: str, folder: Path) -> Path:
    """The repository's files at ``ref``, written under ``folder``."""
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def _suite_copy(tree: Path, suite: Path, output: Path, seeds: int | None, trials: int | None) -> Path:
    """The tree's version of ``suite`` with absolute config paths, its output and results in ``output``."""
    source = tree / suite.relative_to(ROOT)
    spec: dict[str, Any] = yaml.safe_load(source.read_text())
    for method in spec["methods"].values():
        method["config"] = str((source.parent / method["config"]).resolve())
    spec["federations"] = {
        name: None if data is None else str((source.parent / data).resolve())
        for name, data in spec["federations"].items()
    }
    spec["output"] = str(output)
    spec["results"] = str(output / "results")
    if seeds is not None:
        spec["seeds"] = spec["seeds"][:seeds]
    if trials is not None and spec.get("tuning"):
        spec["tuning"]["trials"] = trials
    path = output.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(spec))
    return path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_suite(tree: Path, suite_file: Path, log: Path) -> float:
    """CPU seconds of ``fedhet compare -c suite_file`` run with ``tree``'s code, every descendant included."""
    before = _children_cpu()
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    with log.open("w") as out:
        subprocess.run(
            [sys.executable, "-m", "fedhet", "compare", "-c", str(suite_file)],
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
        )
    while True:  # the orphans adopted while it ran (the fork server ends once its last child has)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return _children_cpu() - before


def work_cpu(output: Path) -> tuple[float, int]:
    """The rounds' and evaluations' CPU seconds of every run and trial under ``output``, and how many runs ran."""
    seconds, runs = 0.0, 0
    for version in sorted(output.rglob("version_*")):
        for record in read_records(version):
            seconds += record.cpu.rounds + record.cpu.evaluation
            runs += record.command == "fit"
    return seconds, runs


def main() -> None:
    """Run the suite in both trees, alternating, and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="9390786", help="the git ref of the code measured as before")
    parser.add_argument("--repeats", type=int, default=1, help="before/after pairs, alternating")
    parser.add_argument("--suite", type=Path, default=SUITE, help="the suite file, in this repository")
    parser.add_argument("--seeds", type=int, help="only the first N seeds of the suite")
    parser.add_argument("--trials", type=int, help="N tuning trials per method instead of the suite's")
    args = parser.parse_args()
    _adopt_orphans()
    suite = args.suite.resolve()
    load_before = os.getloadavg()
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    work: list[tuple[float, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": _tree(args.before, Path(tmp) / "before"), "after": ROOT}
        for k in range(args.repeats):
            for name, tree in trees.items():
                output = Path(tmp) / f"{name}{k}"
                suite_file = _suite_copy(tree, suite, output, args.seeds, args.trials)
                cpu[name].append(run_suite(tree, suite_file, Path(tmp) / f"{name}{k}.log"))
                print(f"{name} {k}: {cpu[name][-1]:.1f} CPU s", flush=True)
                if name == "after":
                    work.append(work_cpu(output))
    load_after = os.getloadavg()
    seconds, runs = work[0]
    before, after = statistics.median(cpu["before"]), statistics.median(cpu["after"])
    shrunk = "".join(f" --{flag} {value}" for flag, value in (("seeds", args.seeds), ("trials", args.trials)) if value)
    lines = [
        "# Suite CPU before and after (benchmarks/suite_throughput.py)",
        "",
        f"- commit: `{current_commit()}` (after) against `{args.before}` (before); CPUs: {os.cpu_count()}",
        f"- load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}",
        f"- command: `python benchmarks/suite_throughput.py --before {args.before} --repeats {args.repeats}"
        f" --suite {suite.relative_to(ROOT)}{shrunk}`",
        f"- {runs} runs and tuning trials; their rounds and evaluations: {seconds:.1f} CPU s (from their records)",
        "",
        "| code | suite CPU s (median) | each | per-run overhead CPU s | runs per CPU hour |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} |"
            f" {(statistics.median(values) - seconds) / runs:.2f} | {runs / statistics.median(values) * 3600:.0f} |"
            for name, values in cpu.items()
        ),
        "",
        f"Suite CPU after / before: {after / before:.2f} (target <= 0.4); per-run overhead after: "
        f"{(after - seconds) / runs:.2f} CPU s (target <= 0.5)",
    ]
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "suite_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
