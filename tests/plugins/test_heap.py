"""The CPU heap kept for reuse (``fedhet.plugins.heap``) and the trainer's ``retain_cpu_heap``."""

import platform
import subprocess
import sys

import pytest

from fedhet.plugins import heap
from tests.plugins.test_trainer import make_trainer

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Five 8 MiB tensors made (and written) then freed, ten times: with glibc's own thresholds the heap's free top (40 MiB)
# is given back after each pass and the next pass faults every page in again (~10,000 faults a pass); kept, none.
PROBE = """
import resource, torch
from fedhet.plugins.heap import retain_freed_memory

def faults_per_pass():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        blocks = [torch.ones(2 << 20) for _ in range(5)]
        del blocks
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10

faults_per_pass()  # glibc's thresholds adapt to the first blocks freed
system = faults_per_pass()
applied = retain_freed_memory()
faults_per_pass()
print(system, applied, faults_per_pass())
"""


@pytest.mark.skipif(not GLIBC, reason="the setting applies to glibc's malloc only")
def test_freed_blocks_are_reused_without_faulting_pages_in_again():
    """In a fresh process, so that this one's allocator is left as it is."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    system, applied, retained = out.stdout.split()
    assert applied == "True"
    assert float(system) > 5000  # 40 MiB of 4 KiB pages a pass: the heap was trimmed and faulted in again
    assert float(retained) < 100


@pytest.mark.parametrize("kwargs", [{"mmap_threshold_mb": 0}, {"mmap_threshold_mb": 33}, {"trim_threshold_mb": 0}])
def test_thresholds_out_of_range_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        heap.retain_freed_memory(**kwargs)


@pytest.mark.parametrize("retain", [True, False])
def test_a_cpu_fit_retains_the_heap_unless_told_not_to(tmp_path, tiny_federation, monkeypatch, retain):
    from fedhet.modules import FedAvg

    calls = []
    monkeypatch.setattr("fedhet.plugins.trainer.retain_freed_memory", lambda: calls.append(True))
    make_trainer(tmp_path, rounds=1, logger=False, retain_cpu_heap=retain).fit(FedAvg(lr=0.1), tiny_federation)
    assert calls == ([True] if retain else [])
