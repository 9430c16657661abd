import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedhet.datamodules.datasets import _common
from fedhet.datamodules.datasets._common import VENDORED_SHA256, fit_standardizer, holdout_split, vendored_bytes

DATA = Path(_common.__file__).parent / "data"


def test_every_vendored_file_is_listed_with_its_checksum():
    files = {path.name for path in DATA.iterdir() if path.name != "SOURCES.md"}
    assert files == set(VENDORED_SHA256)
    sources = (DATA / "SOURCES.md").read_text()
    for name, digest in VENDORED_SHA256.items():
        raw = (DATA / name).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == digest
        row = next(line for line in sources.splitlines() if line.startswith(f"| `{name}`"))
        assert digest in row
        assert f"{len(raw):,}" in row
    total = sum((DATA / name).stat().st_size for name in VENDORED_SHA256)
    assert f"Total: {total:,} bytes" in sources
    assert total < 3_000_000


def test_checksum_mismatch_is_refused(monkeypatch):
    monkeypatch.setitem(VENDORED_SHA256, "va.csv", "0" * 64)
    with pytest.raises(OSError, match=re.escape("'va.csv' has sha256")):
        vendored_bytes("va.csv")


def test_holdout_split_partitions_rows():
    train, val, test = holdout_split(100, 0.2, 0.25, seed=5)
    assert (len(train), len(val), len(test)) == (60, 20, 20)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, val, test])), np.arange(100))
    assert [len(part) for part in holdout_split(10, 0.0, 0.0, seed=0)] == [10, 0, 0]
    with pytest.raises(ValueError, match="val_fraction"):
        holdout_split(10, 0.2, -0.1, seed=0)


def test_standardizer_matches_population_statistics_and_ignores_unobserved_cells():
    x = torch.tensor([[1.0, 2.0, 7.0], [3.0, 2.0, -1.0], [5.0, 2.0, 9.0]])
    observed = torch.tensor([[True, True, True], [True, True, False], [True, True, True]])
    mean, scale = fit_standardizer(x, observed)
    torch.testing.assert_close(mean, torch.tensor([3.0, 2.0, 8.0]))
    torch.testing.assert_close(scale, torch.tensor([np.sqrt(8 / 3), 1.0, 1.0]).float())
    mean, scale = fit_standardizer(x, torch.zeros_like(observed))
    assert mean.tolist() == [0.0, 0.0, 0.0]
    assert scale.tolist() == [1.0, 1.0, 1.0]
