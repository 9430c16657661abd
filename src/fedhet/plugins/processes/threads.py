"""A run's compute threads: one fixed number per process, so its float sums never depend on the machine's cores.

A CPU kernel that runs on several threads splits its sums over them, so a float32 result depends on how many
threads ran it: the same run gives other numbers on a machine with other cores, or when the cores are shared by
other runs (torch's default is every core of the machine). A run therefore sets its threads to a number of its
config (``trainer.processes.threads``, 1 by default), recorded in the run folder's ``config.yaml``, in every
process it runs: the CLI before it builds the model and data, the trainer again once its processes are launched
(Lightning's launcher spreads the cores over the processes otherwise).
"""

from __future__ import annotations

import contextlib

import torch
from threadpoolctl import threadpool_limits


def pin_threads(threads: int) -> None:
    """Run this process's compute on ``threads`` threads: torch's intra-op pool and NumPy/SciPy's BLAS.

    torch's inter-op pool (``torch.jit.fork`` tasks; it splits no sum) is sized too while it has not started, and left
    as it is once it has (torch refuses to resize it then).

    Args:
        threads: at least 1.

    """
    torch.set_num_threads(threads)
    threadpool_limits(limits=threads, user_api="blas")
    if torch.get_num_interop_threads() != threads:
        with contextlib.suppress(RuntimeError):  # the pool already ran work: torch keeps its size for good
            torch.set_num_interop_threads(threads)
