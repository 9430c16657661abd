"""Reading a wide CSV site: seconds to read a file of W columns and to build a one-site ``CSVFederation`` of it.

Column lookups used to scan the header (10k / 20k / 40k columns: 1.6 / 5.9 / 23.7 s in ``read_site_table`` at
``9390786``; 10^5 columns: no answer in 120 s); both steps should now grow linearly with the number of cells. Each
file has ``--rows`` rows of random numbers and a 0/1 label, written to a temporary folder. Writes
``results/csv_columns.md`` and ``.csv``; take figures on a quiet machine.
``python benchmarks/csv_columns.py [--widths 10000 20000 40000 100000] [--rows 10]``
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import write_table
from fedhet.datamodules import CSVFederation
from fedhet.datamodules.csv_table import read_site_table


def _write(path: Path, width: int, rows: int) -> None:
    rng = np.random.default_rng(0)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([f"c{j}" for j in range(width)] + ["y"])
        for i in range(rows):
            writer.writerow([f"{v:.3f}" for v in rng.normal(size=width)] + [i % 2])


def main() -> None:
    """Time both steps at each width and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[10_000, 20_000, 40_000, 100_000])
    parser.add_argument("--rows", type=int, default=10)
    parser.add_argument("--out", default=None, help="results folder (default: benchmarks/results)")
    args = parser.parse_args()
    rows = []
    for width in args.widths:
        with tempfile.TemporaryDirectory() as tmp:
            _write(Path(tmp) / "site.csv", width, args.rows)
            start = time.perf_counter()
            read_site_table(Path(tmp) / "site.csv")
            read_s = time.perf_counter() - start
            start = time.perf_counter()
            CSVFederation(tmp, label_column="y", val_fraction=0.0, test_fraction=0.5)
            build_s = time.perf_counter() - start
        rows.append({"columns": width, "rows": args.rows, "read_s": f"{read_s:.2f}", "federation_s": f"{build_s:.2f}"})
        print(rows[-1], flush=True)
    options = {} if args.out is None else {"out_dir": Path(args.out)}
    write_table(
        "csv_columns",
        "Wide CSV sites (benchmarks/csv_columns.py)",
        rows,
        {"columns": "columns", "rows": "rows", "read_s": "read_site_table (s)", "federation_s": "CSVFederation (s)"},
        **options,
    )


if __name__ == "__main__":
    main()
