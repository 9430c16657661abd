"""The CPU heap kept for reuse (``fedhet.plugins.processes.heap``) and the trainer's ``retain_cpu_heap``."""

import platform
import subprocess
import sys

import pytest

from fedhet.plugins.processes import heap
from tests.plugins.test_trainer import make_trainer

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Five 8 MiB tensors made (and written) then freed, ten times. glibc's adaptive thresholds make the pages faulted in
# per pass depend on where the blocks land in the heap (from none to every page, from run to run), so the probe first
# holds glibc's initial thresholds (128 KiB) fixed: every 8 MiB block is then mapped afresh and its 2,048 pages are
# faulted in on every pass (~10,000 a pass). Once the heap is retained, the blocks come from the heap and are reused.
PROBE = """
import ctypes, resource, torch
from fedhet.plugins.processes.heap import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, retain_freed_memory

def faults_per_pass():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        blocks = [torch.ones(2 << 20) for _ in range(5)]
        del blocks
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10

mallopt = ctypes.CDLL(None).mallopt
mallopt(M_MMAP_THRESHOLD, 128 << 10)
mallopt(M_TRIM_THRESHOLD, 128 << 10)
faults_per_pass()
mapped = faults_per_pass()
applied = retain_freed_memory()
faults_per_pass()
print(mapped, applied, faults_per_pass())
"""


@pytest.mark.skipif(not GLIBC, reason="the setting applies to glibc's malloc only")
def test_freed_blocks_are_reused_without_faulting_pages_in_again():
    """In a fresh process, so that this one's allocator is left as it is."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    mapped, applied, retained = out.stdout.split()
    assert applied == "True"
    assert float(mapped) > 5000  # 40 MiB of 4 KiB pages a pass, mapped and faulted in again
    assert float(retained) < 100


@pytest.mark.parametrize("kwargs", [{"mmap_threshold_mb": 0}, {"mmap_threshold_mb": 33}, {"trim_threshold_mb": 0}])
def test_thresholds_out_of_range_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        heap.retain_freed_memory(**kwargs)


@pytest.mark.parametrize("retain", [True, False])
def test_a_cpu_fit_retains_the_heap_unless_told_not_to(tmp_path, tiny_federation, monkeypatch, retain):
    from fedhet.modules import FedAvg

    calls = []
    monkeypatch.setattr("fedhet.plugins.rounds.launch.retain_freed_memory", lambda: calls.append(True))
    make_trainer(tmp_path, rounds=1, logger=False, retain_cpu_heap=retain).fit(FedAvg(lr=0.1), tiny_federation)
    assert calls == ([True] if retain else [])
