"""Every figure the accuracy prose cites comes from a committed file, or is marked as a paper's (issue 39, item 7).

The accuracy sections (:data:`SECTIONS`) of ``benchmarks/README.md`` and ``docs/`` are cut into blocks (a paragraph, a
list item, a table row). A block's sources are the results files, folders and suites it names in backticks
(``results/suites/vowel/table.md``, ``parity_flic*.md``, ``benchmarks/suites/privacy_digits.yaml``, or a suite by its
name, ``satellite_flic``: its results folder); a block that names none cites the sources of the block before it. Each
decimal of a block must appear in one of its sources, as written there or as a percentage of a fraction written there
(``86.79`` for ``0.8679``), rounded to the digits the prose gives.

**Marking a paper's figure**: write ``(paper)`` right after it, or after a group of figures joined by ``/``, e.g.
``against its 91.83 / 90.47 / 88.25 / 85.68 (paper)``: such figures are the paper's and need no file here.

There is no list of exceptions: the figures of first runs whose tables were overwritten, of retired scripts and wall
times that no table records were removed from the text (issue 39, item 8), and a figure with no source fails the test.
"""

from __future__ import annotations

import glob
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SECTIONS = {
    "README.md": ["Methods"],
    "benchmarks/README.md": ["Accuracy against the papers", "Results by method", "Real data we did not tune on"],
    "docs/privacy.md": ["Cost", "Robust aggregation (poisoned uploads)"],
    "docs/datasets.md": ["Your own CSV files"],
}
"""The sections whose figures are accuracies (or the settings and costs of the runs that measured them)."""

DECIMAL = re.compile(r"(?<![\w.:/-])(\d+\.\d+)(?![\w.])")
PAPER = re.compile(r"((?:\d+\.\d+\s*/\s*)*\d+\.\d+)\s*\(paper\)")
CITED = re.compile(r"`([^`\s]+)`")
NUMBER = re.compile(r"\d+\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?")
SOURCE_SUFFIXES = (".md", ".csv", ".jsonl", ".yaml", ".json")


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of its level or above."""
    lines, level = [], None
    for line in text.splitlines():
        match = re.match(r"^(#+) (.*)", line)
        if match and level is not None and len(match.group(1)) <= level:
            break
        if match and match.group(2).strip() == heading:
            level = len(match.group(1))
        elif level is not None:
            lines.append(line)
    assert level is not None, f"no section {heading!r}"
    return "\n".join(lines)


def blocks(text: str) -> Iterator[str]:
    """Paragraphs, list items and table rows (a table's rule and fenced code, a config's settings, are skipped)."""
    current: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        starts = line.startswith(("|", "- "))
        if (not line.strip() or starts) and current:
            yield "\n".join(current)
            current = []
        if line.startswith("|"):
            if not re.match(r"^\|[-| ]+\|$", line):
                yield line
        elif line.strip():
            current.append(line)
    if current:
        yield "\n".join(current)


def sources(block: str) -> list[Path]:
    """The committed files a block cites: results files, folders, suite files, and suites by name."""
    found: list[Path] = []
    for name in CITED.findall(block):
        candidates = [name, f"benchmarks/{name}", f"benchmarks/results/{name}"]
        if re.fullmatch(r"[a-z0-9_]+", name) and (RESULTS / "suites" / name).is_dir():
            candidates.append(f"benchmarks/results/suites/{name}")
        for candidate in candidates:
            for path in map(Path, glob.glob(str(ROOT / candidate))):
                if path.parent.parent == RESULTS / "suites":  # a suite's table: its CSV and raw rows too
                    path = path.parent
                files = sorted(path.rglob("*")) if path.is_dir() else [path]
                found += [f for f in files if f.is_file() and f.suffix in SOURCE_SUFFIXES]
    return found


def numbers(files: list[Path]) -> set[float]:
    return {float(token) for path in files for token in NUMBER.findall(path.read_text(errors="replace"))}


def written_in(figure: str, values: set[float]) -> bool:
    """Whether ``figure`` is one of ``values`` (or its percentage) rounded to the figure's digits."""
    digits = len(figure.split(".")[1])
    return any(f"{value * scale:.{digits}f}" == figure for value in values for scale in (1, 100))


def orphans() -> tuple[Counter[tuple[str, str, str]], int, int]:
    """The figures with no source, the figures checked, and those marked as a paper's."""
    missing: Counter[tuple[str, str, str]] = Counter()
    checked = papers = 0
    for name, headings in SECTIONS.items():
        text = (ROOT / name).read_text()
        for heading in headings:
            cited: list[Path] = []
            for block in blocks(section(text, heading)):
                cited = sources(block) or cited
                papers += sum(len(DECIMAL.findall(m.group(1))) for m in PAPER.finditer(block))
                prose = CITED.sub(" ", PAPER.sub(" ", block))
                values = numbers(cited)
                for figure in DECIMAL.findall(prose):
                    checked += 1
                    if not written_in(figure, values):
                        missing[(name, heading, figure)] += 1
    return missing, checked, papers


def test_every_accuracy_figure_has_a_committed_source_or_is_marked_as_a_papers() -> None:
    missing, checked, _ = orphans()
    assert not missing, f"figures with no source (cite the table, or mark a paper's figure '(paper)'): {dict(missing)}"
    assert checked > 300  # the sections are found and read


def test_a_figure_is_matched_as_written_or_as_a_percentage() -> None:
    assert written_in("0.917", {0.91666})
    assert written_in("86.79", {0.86789})
    assert not written_in("0.918", {0.91666})
    block = "FedPAC 0.880 against its 91.83 / 90.47 (paper), `results/suites/vowel/table.md`"
    assert [m.group(1) for m in PAPER.finditer(block)] == ["91.83 / 90.47"]
    assert DECIMAL.findall(CITED.sub(" ", PAPER.sub(" ", block))) == ["0.880"]
