"""Latency of one gather's synchronisation between 2 CPU processes: a gloo ``all_gather`` against the control block.

What is compared:
    Each gather of ``fedhet.plugins.processes.distributed.gather_objects`` first tells every process where the others'
    packed objects are (two integers each: length and shared-memory segment). Two ways, in the same 2 forked processes:

    * **gloo**: ``torch.distributed.all_gather`` of a 2-element ``int64`` tensor over the process group (loopback TCP),
      as fedhet did before and still does where stores may be seen out of order (not x86-64);
    * **control block**: ``SharedSegments.exchange`` (``fedhet.plugins.processes.shared_memory``): each process writes
      its two integers and the gather's number into a shared-memory block and polls the other's number.

    Each side runs ``--calls`` gathers back to back (``idle``), then ``--calls`` gathers each after ``--busy-ms`` of
    matrix products in both processes (``after compute``, as a round's gathers follow the clients' training: the two
    processes arrive a little apart). A call's time is rank 0's ``perf_counter`` span around it, which includes
    waiting for the other process; the table gives the median, the 90th percentile and the maximum in µs, and checks
    that every call returned the other process's integers. The machine should be otherwise idle (2 processes need 2
    free cores). Nothing is asserted.

Usage::

    python benchmarks/collective_latency.py                  # 300 calls per side and phase, 5 ms of compute
    python benchmarks/collective_latency.py --calls 1000 --busy-ms 20

Results go to ``benchmarks/results/collective_latency.{csv,md}``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import secrets
import socket
import statistics
import time
from multiprocessing.connection import Connection

import torch
import torch.distributed as dist

from _common import environment, write_table
from fedhet.plugins.processes.shared_memory import SharedSegments, ordered_stores, shared_memory_available

COLUMNS = {
    "transport": "transport",
    "phase": "phase",
    "calls": "calls",
    "median_us": "median µs",
    "p90_us": "p90 µs",
    "max_us": "max µs",
}


def _busy(seconds: float) -> None:
    """Matrix products for about ``seconds`` of this process's time."""
    end = time.perf_counter() + seconds
    x = torch.randn(200, 200)
    while time.perf_counter() < end:
        x = x @ x.T / 200


def _time_calls(call, rank: int, calls: int, busy_s: float) -> list[float]:
    """Seconds of each of ``calls`` calls of ``call(i)``; raises if a call returns the wrong places."""
    spans = []
    for i in range(calls):
        if busy_s:
            _busy(busy_s)
        start = time.perf_counter()
        places = call(i)
        spans.append(time.perf_counter() - start)
        if places != [(1000 * i, 0), (1000 * i + 1, 1)]:
            raise RuntimeError(f"rank {rank}, call {i}: wrong places {places}")
    return spans


def _worker(rank: int, port: int, token: str, calls: int, busy_s: float, pipe: Connection) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if rank != 0:
        dist.barrier()  # rank 0 has made the control block
    segments = SharedSegments(token, rank, world_size=2, control=True)
    if rank == 0:
        dist.barrier()
    dist.barrier()  # both have mapped it
    if rank == 0:
        segments.control_mapped()
    info, infos = torch.zeros(2, dtype=torch.int64), [torch.zeros(2, dtype=torch.int64) for _ in range(2)]

    def gloo(i: int) -> list[tuple[int, int]]:
        info[0], info[1] = 1000 * i + rank, rank
        dist.all_gather(infos, info)
        return [(int(n), int(g)) for n, g in (t.tolist() for t in infos)]

    def control(i: int) -> list[tuple[int, int]]:
        places = segments.exchange(1000 * i + rank, rank)
        segments.end()
        return places

    results = {}
    for phase, busy in (("idle", 0.0), ("after compute", busy_s)):
        for transport, call in (("gloo all_gather", gloo), ("control block", control)):
            results[(transport, phase)] = _time_calls(call, rank, calls, busy)
    segments.close()
    dist.destroy_process_group()
    if rank == 0:
        pipe.send(results)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--busy-ms", type=float, default=5.0)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    if not (shared_memory_available() and ordered_stores()):
        parser.error("needs /dev/shm and an x86-64 machine (the control block is not used elsewhere)")
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    port, token = _free_port(), secrets.token_hex(6)
    workers = [
        context.Process(target=_worker, args=(rank, port, token, args.calls, args.busy_ms / 1000, send))
        for rank in (0, 1)
    ]
    for worker in workers:
        worker.start()
    results = receive.recv()
    for worker in workers:
        worker.join()
    rows = []
    for (transport, phase), spans in results.items():
        ordered = sorted(spans)
        rows.append(
            {
                "transport": transport,
                "phase": phase,
                "calls": len(spans),
                "median_us": round(statistics.median(ordered) * 1e6, 1),
                "p90_us": round(ordered[int(0.9 * (len(ordered) - 1))] * 1e6, 1),
                "max_us": round(ordered[-1] * 1e6, 1),
            }
        )
    for row in rows:
        print(" | ".join(str(row[key]) for key in COLUMNS))
    if not args.no_save:
        notes = [
            "Written by `benchmarks/collective_latency.py` (its docstring explains the method): rank 0's time per"
            " call, waiting for the other process included, over 2 forked CPU processes with one thread each;"
            f" `after compute`: each call follows {args.busy_ms:g} ms of matrix products in both processes.",
            "",
            f"- command: `python benchmarks/collective_latency.py --calls {args.calls} --busy-ms {args.busy_ms:g}`",
        ]
        print(write_table("collective_latency", "Gather synchronisation latency, 2 CPU processes", rows, COLUMNS, notes,
                          environment()))  # fmt: skip


if __name__ == "__main__":
    main()
