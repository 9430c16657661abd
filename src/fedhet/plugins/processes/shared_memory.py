"""Shared-memory segments through which the processes of one machine hand each other their packed objects.

Gathering the uploads of a round through gloo sends every byte through a loopback TCP socket: on 2 CPU processes
(``benchmarks/processes.py``: 6.4 MB from each process a round) the two broadcasts took ~4 ms of a ~90 ms round. On one
machine the bytes need not move at all: each process writes its packed object into a file of ``/dev/shm`` (RAM), and
the others map that file and copy the tensors out, which took ~1 ms for the same bytes.

Each process owns two segments, used in turn by successive gathers: a process rewrites a segment only two gathers
later, after every process has passed the gather in between, so it can no longer be reading it, and no barrier is
needed to reuse a segment. A segment grows (a new, larger file) when an object does not fit; the others map the new
file in that gather, and the gather then ends with a barrier after which its creator removes the file's name (the
mappings stay valid), so nothing is left in ``/dev/shm`` when the run ends, even when it is killed later. Space is
reserved when a segment is made (``posix_fallocate``): a full ``/dev/shm`` (64 MB in a default Docker container)
gives an error at once instead of a ``SIGBUS`` at a write, and that process's object then travels through gloo.

The processes also tell each other where their objects are (length and segment) through shared memory: a small
control block holds, for each process and each of the two slots, the number of the gather it has reached and its
object's place, and a process waits for the others by polling it (:meth:`SharedSegments.exchange`). A gloo
``all_gather`` of those few numbers took 0.2 ms at the median and 1.5-4.5 ms in a tenth of the calls on 2 CPU
processes; the control block, a few microseconds. It relies on the other processes seeing one process's stores in
the order it made them, which x86-64 guarantees (:func:`ordered_stores`); elsewhere the places go through gloo.
"""

from __future__ import annotations

import logging
import mmap
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

log = logging.getLogger(__name__)

SHM_ROOT = Path("/dev/shm")
_MIN_SEGMENT = 1 << 20  # bytes
_FIELDS = 3  # per process and slot in the control block: the gather reached, its object's length, its generation
_SPIN_S = 1e-3  # how long a waiting process yields the CPU in a loop before it polls with short sleeps
_POLL_S = 50e-6  # the sleep between polls after that
_CHECK_S = 0.5  # how often a waiting process asks whether the others are still alive


def shared_memory_available() -> bool:
    """Whether this machine offers ``/dev/shm`` files that can be mapped (Linux)."""
    return SHM_ROOT.is_dir() and os.access(SHM_ROOT, os.W_OK) and hasattr(os, "posix_fallocate")


def ordered_stores() -> bool:
    """Whether other processes see this process's stores to shared memory in program order (x86-64: total store order).

    The control block needs it: a process writes its object's place, then the gather's number, and the others read the
    place once they see the number.
    """
    return platform.machine().lower() in ("x86_64", "amd64")


class _Mapping:
    """A ``/dev/shm`` file mapped into this process, seen as a ``uint8`` tensor of its whole size."""

    def __init__(self, path: Path, size: int, create: bool) -> None:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
        try:
            if create:
                os.posix_fallocate(fd, 0, size)
            self._map = mmap.mmap(fd, size)
        except OSError:
            if create:
                path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        self.size = size
        self.tensor: Tensor | None = torch.frombuffer(self._map, dtype=torch.uint8)

    @property
    def map(self) -> mmap.mmap:
        """The mapping itself."""
        return self._map

    def view(self, num_bytes: int) -> Tensor:
        """The first ``num_bytes`` bytes, shape ``(num_bytes,)``."""
        if self.tensor is None:
            raise RuntimeError("shared-memory segment used after it was closed")
        return self.tensor[:num_bytes]

    def close(self) -> None:
        """Unmap (the views that export the mapping go first, or the map could not close)."""
        self.tensor = None
        self._map.close()


class SharedSegments:
    """This process's two segments and its mappings of the other processes' segments, for one run's gathers.

    Every process of the run calls :meth:`writable`, then :meth:`exchange` (or an ``all_gather`` of the same places)
    and :meth:`readable` for each other process, reads :attr:`grew`, then calls :meth:`end`, once per gather and in
    the same order (gathers are collective), so the slot a gather uses agrees on every process.

    Args:
        token: the run's name for its files, the same on every process (``fedhet-<token>-r<rank>-s<slot>-g<n>``).
        rank: this process's rank.
        world_size: the run's number of processes.
        control: give the run's control block for :meth:`exchange`: rank 0 makes its file, the others map it once
            rank 0 has made it; :meth:`control_mapped` then removes its name. ``False``: none (places go through the
            process group).

    """

    def __init__(self, token: str, rank: int, world_size: int, control: bool = False) -> None:
        self.token = token
        self.rank = rank
        self.world_size = world_size
        self.gathers = 0
        self._control: _Mapping | None = None
        self._places: memoryview | None = None
        if control:
            size = 2 * world_size * _FIELDS * 8
            self._control = _Mapping(self.control_path, size, create=rank == 0)
            self._places = memoryview(self._control.map).cast("q")
        self._own: list[_Mapping | None] = [None, None]
        self._generation = [0, 0]
        self._theirs: dict[tuple[int, int], tuple[int, _Mapping]] = {}
        self._created: list[Path] = []
        self.grew = False
        """Whether a process grew its segment in this gather: this one made a file, or mapped another's new one. Every
        process maps every other's new file in the gather that makes it, so the answer is the same on every process."""

    def path(self, rank: int, slot: int, generation: int) -> Path:
        """The file of ``rank``'s segment ``slot`` in its ``generation``-th size."""
        return SHM_ROOT / f"fedhet-{self.token}-r{rank}-s{slot}-g{generation}"

    @property
    def control_path(self) -> Path:
        """The file of the run's control block."""
        return SHM_ROOT / f"fedhet-{self.token}-control"

    @property
    def has_control(self) -> bool:
        """Whether :meth:`exchange` can be used (a control block was given)."""
        return self._places is not None

    def control_mapped(self) -> None:
        """Remove the control block's name, once every process has mapped it (the mappings stay valid)."""
        self.control_path.unlink(missing_ok=True)

    def exchange(
        self, num_bytes: int, generation: int, check: Callable[[], None] | None = None, timeout_s: float = 1800.0
    ) -> list[tuple[int, int]]:
        """Publish this process's object's place in this gather and wait for every other process's.

        The fields of gather ``k`` live in slot ``k % 2``: a process writes slot ``k % 2`` again only in gather
        ``k + 2``, after every process has reached gather ``k + 1`` and so has read what it needed of gather ``k``.
        A waiting process yields the CPU in a loop for about a millisecond, then polls with 50 µs sleeps.

        Args:
            num_bytes: this process's object's length.
            generation: its segment's generation (``-1``: not in shared memory).
            check: called every half second of waiting; raises when another process is gone.
            timeout_s: give up after this long.

        Returns:
            ``(num_bytes, generation)`` of every process, in rank order.

        Raises:
            TimeoutError: when another process has not reached the gather within ``timeout_s``.

        """
        places = self._places
        if places is None:
            raise RuntimeError("exchange() needs the run's control block (SharedSegments(..., control=True))")
        number = self.gathers + 1  # 0 means never written
        base = self.slot * self.world_size * _FIELDS
        row = base + self.rank * _FIELDS
        places[row + 1] = num_bytes
        places[row + 2] = generation
        places[row] = number  # last: another process reads the place once it sees the number
        others = [r for r in range(self.world_size) if r != self.rank]
        start = last_check = time.perf_counter()
        while True:
            others = [r for r in others if places[base + r * _FIELDS] != number]
            if not others:
                break
            now = time.perf_counter()
            if now - start < _SPIN_S:
                os.sched_yield()
                continue
            if now - last_check > _CHECK_S:
                last_check = now
                if check is not None:
                    check()
                if now - start > timeout_s:
                    raise TimeoutError(
                        f"rank {self.rank}: ranks {others} did not reach gather {number} in {timeout_s} s"
                    )
            time.sleep(_POLL_S)
        return [(places[base + r * _FIELDS + 1], places[base + r * _FIELDS + 2]) for r in range(self.world_size)]

    @property
    def slot(self) -> int:
        """The segment this gather uses (they alternate)."""
        return self.gathers % 2

    def writable(self, num_bytes: int) -> tuple[Tensor | None, int]:
        """Room for this process's ``num_bytes``-byte object in this gather's segment.

        Returns:
            a ``(num_bytes,)`` ``uint8`` view of the segment and the segment's generation (which the others need to
            find it), or ``(None, -1)`` when ``/dev/shm`` has no room for a larger segment (logged; the object then
            travels through the process group).

        """
        slot = self.slot
        own = self._own[slot]
        if own is None or own.size < num_bytes:
            size = max(_MIN_SEGMENT, 1 << max(num_bytes - 1, 0).bit_length())
            path = self.path(self.rank, slot, self._generation[slot] + 1)
            try:
                grown = _Mapping(path, size, create=True)
            except OSError as err:
                log.warning("rank %d: no room for %d bytes in %s (%s); gathering through the process group instead",
                            self.rank, size, SHM_ROOT, err)  # fmt: skip
                return None, -1
            if own is not None:
                own.close()
            self._own[slot] = own = grown
            self._generation[slot] += 1
            self._created.append(path)
            self.grew = True
        return own.view(num_bytes), self._generation[slot]

    def readable(self, rank: int, generation: int, num_bytes: int) -> Tensor:
        """``rank``'s object of this gather: the first ``num_bytes`` bytes of its segment in ``generation``."""
        key = (rank, self.slot)
        known = self._theirs.get(key)
        if known is None or known[0] != generation:
            if known is not None:
                known[1].close()
            path = self.path(rank, self.slot, generation)
            known = (generation, _Mapping(path, path.stat().st_size, create=False))
            self._theirs[key] = known
            self.grew = True
        return known[1].view(num_bytes)

    def end(self) -> None:
        """Close this gather: remove the names of the files it created (call after every process mapped them)."""
        for path in self._created:
            path.unlink(missing_ok=True)
        self._created.clear()
        self.grew = False
        self.gathers += 1

    def close(self) -> None:
        """Unmap every segment and remove the names of this process's files that still have one."""
        if self._places is not None:
            self._places.release()
            self._places = None
        if self._control is not None:
            self._control.close()
            self._control = None
            if self.rank == 0:
                self.control_mapped()
        for mapping in [*self._own, *(mapping for _, mapping in self._theirs.values())]:
            if mapping is not None:
                mapping.close()
        self._own = [None, None]
        self._theirs.clear()
        for path in self._created:
            path.unlink(missing_ok=True)
        self._created.clear()
