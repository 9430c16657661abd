"""benchmarks/privacy_clip_norms.py: the privacy suites' clipping norms, measured as UploadPrivacy clips them."""

from __future__ import annotations

import csv
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from fedhet.experiments.suite import load_suite

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SUITE = BENCHMARKS / "suites" / "privacy_digits.yaml"


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling _common
    return importlib.import_module("privacy_clip_norms")


@pytest.mark.parametrize("method", ["fedavg", "fedrep"])
def test_the_recorded_norm_is_the_one_upload_privacy_clips(script, tmp_path, method):
    """In round 1 every client starts from the same shared parameters whether the run is private or not, so the
    norms the probe records in the suite's ``<method>_clip`` run (uploads already clipped at C) are min(norm, C) of
    the no-DP run's. Float32 rounding of ``received + clipped - received`` moves a norm by at most about one ulp of
    each weight (|w| < 2 here) over a few thousand weights: well under 1e-5."""
    suite = load_suite(SUITE)
    raw = script.update_norms(suite, method, tmp_path / "raw", rounds=1)
    clip = script.suite_clip_norm(suite, method)
    clipped = script.update_norms(suite, f"{method}_clip", tmp_path / "clipped", rounds=1)
    assert len(raw) == len(clipped) == 10
    assert any(norm > clip for norm in raw)  # something is clipped
    assert clipped == pytest.approx([min(norm, clip) for norm in raw], abs=1e-5)


def test_the_script_writes_each_method_median_with_the_footer(tmp_path):
    command = [sys.executable, str(BENCHMARKS / "privacy_clip_norms.py"), "--rounds", "2", "--suites", str(SUITE)]
    subprocess.run([*command, "--out", str(tmp_path)], check=True, capture_output=True, timeout=600)
    rows = list(csv.DictReader((tmp_path / "privacy_clip_norms.csv").open()))
    assert [(row["suite"], row["method"], row["updates"]) for row in rows] == [
        ("privacy_digits", "fedavg", "20"),
        ("privacy_digits", "fedrep", "20"),
    ]
    for row in rows:
        assert float(row["min_norm"]) <= float(row["median_norm"]) <= float(row["max_norm"])
    text = (tmp_path / "privacy_clip_norms.md").read_text()
    assert "- commit: `" in text
    assert "- seed: `0`" in text
    assert "- config: `benchmarks/suites/privacy_digits.yaml`" in text
