"""benchmarks/gl_reproduce.py --resume: the CSV keeps complete seeds only, and reading it back gives the same rows."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def gl_reproduce(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("gl_reproduce", BENCHMARKS / "gl_reproduce.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gl_reproduce", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    return module


def _rows(module, seeds: list[int], methods: list[str]) -> list[dict[str, object]]:
    cells = [(metric, site) for metric in module.METRICS for site in module.GL_SITES]
    return [
        {"method": method, "seed": seed, "client": site, "metric": metric, "value": 0.5 + 0.01 * seed + 0.001 * i}
        for seed in seeds
        for method in methods
        for i, (metric, site) in enumerate(cells)
    ]


def test_resume_reads_back_the_complete_seeds(gl_reproduce) -> None:
    args = argparse.Namespace(seeds=3, epochs=10, batches=5, aggregate_every="step", workers=1, threads=1, tag="_t")
    methods = list(gl_reproduce.METHODS)
    complete = _rows(gl_reproduce, [0, 1], methods)
    partial = _rows(gl_reproduce, [2], methods[:2])  # seed 2 stopped half-way: not kept, so --resume runs it again
    text = gl_reproduce.write_results(args, complete + partial, 60.0, resumed=1)

    assert "2 of 3 seeds finished, 1 of them read from an earlier run" in text
    back = gl_reproduce.finished_rows(gl_reproduce.RESULTS / "gl_heart_t.csv")
    assert back == complete
    assert {(row["method"], row["seed"]) for row in back} == {(m, s) for s in (0, 1) for m in methods}


def test_resume_without_a_csv_starts_from_nothing(gl_reproduce) -> None:
    assert gl_reproduce.finished_rows(gl_reproduce.RESULTS / "missing.csv") == []
