"""The C heap of a CPU run kept for reuse, so that a training step's large tensors do not fault in fresh pages.

glibc's ``malloc`` serves a block of at least ``M_MMAP_THRESHOLD`` bytes with its own ``mmap`` (unmapped when freed)
and gives the free top of its heap back to the system once it exceeds ``M_TRIM_THRESHOLD``. Both thresholds start
low (128 KiB) and adapt to the blocks freed, but a CPU training step allocates and frees activations and gradients of
megabytes in varying order, and the heap keeps being trimmed: steps then touch pages the kernel must map and zero
again, how many depending on the process's allocation history. FedAvg with the FedPAC paper's Fashion-MNIST CNN (10
clients of 600 images, batch 50, E = 5), one fresh 12-round fit on one CPU thread: 3.8-5.4 s per round (4.4 on
average) and 4.4 million page faults with glibc's own thresholds, 3.6-3.9 s (3.75) and 5,500 faults with the heap
kept; in a process that had run other fits before, up to 6.0 s against 3.8 s. (FedPAC's own paper-scale rounds
happened to fault little: 10.0 s either way.) :func:`retain_freed_memory` raises both thresholds, so freed blocks stay
in the process for the next step. The cost: the process keeps up to ``trim_threshold_mb`` of freed memory it would
have returned, and blocks of up to ``mmap_threshold_mb`` come from the heap (larger ones are still mapped).

The setting is process-wide: :class:`~fedhet.plugins.FederatedTrainer` applies it in each of its processes when it
launches a CPU run (``fit``, ``validate``, ``test``), unless ``processes.retain_cpu_heap=False``; nothing changes
where the C library is not glibc. ``benchmarks/heap_retention.py`` measures it.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD = -1
"""``mallopt`` parameter: the free top of the heap, in bytes, above which glibc gives memory back to the system."""
M_MMAP_THRESHOLD = -3
"""``mallopt`` parameter: the request size, in bytes, from which glibc maps a block of its own."""
MAX_MMAP_THRESHOLD_MB = 32
"""The largest ``M_MMAP_THRESHOLD`` glibc takes on a 64-bit machine (``DEFAULT_MMAP_THRESHOLD_MAX``)."""


def retain_freed_memory(mmap_threshold_mb: int = MAX_MMAP_THRESHOLD_MB, trim_threshold_mb: int = 128) -> bool:
    """Keep freed blocks below ``mmap_threshold_mb`` MiB in the heap; trim it only above ``trim_threshold_mb`` MiB.

    Args:
        mmap_threshold_mb: requests below this many MiB come from the heap (at most :data:`MAX_MMAP_THRESHOLD_MB`).
        trim_threshold_mb: the heap's free top is given back to the system only above this many MiB.

    Returns:
        whether glibc took both settings (``False`` with another C library, which is then left as it is).

    Raises:
        ValueError: a threshold out of range.

    """
    if not 0 < mmap_threshold_mb <= MAX_MMAP_THRESHOLD_MB:
        raise ValueError(f"mmap_threshold_mb must be in (0, {MAX_MMAP_THRESHOLD_MB}], got {mmap_threshold_mb}")
    if trim_threshold_mb <= 0:
        raise ValueError(f"trim_threshold_mb must be positive, got {trim_threshold_mb}")
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mib = 1 << 20
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold_mb * mib)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim_threshold_mb * mib)
    )
