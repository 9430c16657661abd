"""A table of every shipped config's federation: clients, feature dimensions, classes and samples per client.

Run from the repository root: ``python benchmarks/describe_federations.py``. Writes
``benchmarks/results/federations.md`` with the environment footer (command, commit, machine). Each config's
``data`` block is instantiated exactly as ``fedhet fit`` would.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from _common import environment  # benchmarks/ is on the path when run as a script
from fedhet.cli import FederatedCLI

ROOT = Path(__file__).parents[1]


def summarize(values: list[object]) -> str:
    """``value`` if all equal, else ``min-max``; for tuples, the distinct values with their counts."""
    if all(isinstance(v, (int, float)) for v in values):
        lo, hi = min(values), max(values)
        return str(lo) if lo == hi else f"{lo}-{hi}"
    counts = Counter(map(str, values))
    return ", ".join(f"{v}" + (f" x{n}" if n > 1 else "") for v, n in counts.most_common(4)) + (
        ", ..." if len(counts) > 4 else ""
    )


def main() -> None:
    rows = ["| config | clients | features per client | classes per client | train / val / test per client |"]
    rows.append("|---|---|---|---|---|")
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        if path.parent.name in ("data", "suites"):  # a federation alone; a fedhet compare suite
            continue
        cli = FederatedCLI(args=["-c", str(path)], run=False)
        data = cli.datamodule
        try:
            data.setup("fit")
        except (FileNotFoundError, ValueError) as err:
            rows.append(f"| {path.relative_to(ROOT)} | not available here: {err} | | | |")
            continue
        specs = list(data.specs.values())
        dims = summarize([s.input_dim for s in specs])
        classes = summarize([len(s.classes) for s in specs])
        sizes = " / ".join(summarize([getattr(s, f"num_{part}") for s in specs]) for part in ("train", "val", "test"))
        rows.append(f"| {path.relative_to(ROOT)} | {len(specs)} | {dims} | {classes} | {sizes} |")
        print(rows[-1], flush=True)
    out = ROOT / "benchmarks" / "results" / "federations.md"
    config = "every config under configs/ that builds a federation (the table's first column)"
    footer = environment(config=config)  # check_results reads it
    rows += ["", *(f"- {key}: `{value}`" for key, value in footer.items())]
    out.write_text("\n".join(rows) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
