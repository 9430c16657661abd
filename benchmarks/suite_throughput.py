"""Throughput of ``fedhet compare``: one small suite run with 1 worker, then with 2, in this process.

Writes runs/hour of each and their ratio to ``results/suite_throughput.md``, with the commit and the machine's load
(a loaded machine understates the ratio: take figures on a quiet one). The suite: the smoke suite's methods and
federation (``configs/suites/smoke.yaml``) without tuning, 2 seeds, in a temporary folder.
``python benchmarks/suite_throughput.py [--seeds 2]``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

from _common import RESULTS_DIR, current_commit
from fedhet.experiments.compare import compare
from fedhet.experiments.suite import load_suite

SMOKE = Path(__file__).resolve().parent.parent / "configs" / "suites" / "smoke.yaml"


def main() -> None:
    """Run the suite with 1 and 2 workers and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds per method")
    args = parser.parse_args()
    base = load_suite(SMOKE)
    methods = {name: dataclasses.replace(spec, search=None) for name, spec in base.methods.items()}
    load_before = os.getloadavg()
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            suite = dataclasses.replace(
                base,
                methods=methods,
                tuning=None,
                seeds=list(range(args.seeds)),
                workers=workers,
                output=Path(tmp) / f"workers{workers}",
            )
            runs = len(suite.federations) * len(suite.methods) * len(suite.seeds)
            start = time.perf_counter()
            compare(suite, progress=lambda line: None)
            rates[workers] = runs / ((time.perf_counter() - start) / 3600)
    load_after = os.getloadavg()
    lines = [
        "# fedhet compare throughput (benchmarks/suite_throughput.py)",
        "",
        f"- commit: `{current_commit()}`; CPUs: {os.cpu_count()}",
        f"- load average (1 min) before / after: {load_before[0]:.2f} / {load_after[0]:.2f}",
        f"- suite: configs/suites/smoke.yaml without tuning, {args.seeds} seeds ({runs} runs: fit + test each)",
        "",
        "| workers | runs/hour |",
        "|---|---|",
        *(f"| {w} | {r:.1f} |" for w, r in rates.items()),
        "",
        f"Ratio (2 workers / 1 worker): {rates[2] / rates[1]:.2f}",
    ]
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "suite_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
