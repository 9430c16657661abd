"""Shared-memory segments between processes of one machine: alternating slots, growth, removal, a full /dev/shm."""

import errno
import os
import secrets
import threading

import pytest
import torch

from fedhet.plugins.processes import shared_memory
from fedhet.plugins.processes.shared_memory import SharedSegments

pytestmark = pytest.mark.skipif(not shared_memory.shared_memory_available(), reason="needs /dev/shm (Linux)")


def pair() -> tuple[SharedSegments, SharedSegments]:
    """A writer (rank 0) and a reader (rank 1) of one run, in this process."""
    token = secrets.token_hex(6)
    return SharedSegments(token, 0, world_size=2), SharedSegments(token, 1, world_size=2)


def files(token: str) -> set[str]:
    return {p.name for p in shared_memory.SHM_ROOT.glob(f"fedhet-{token}-*")}


def gather(writer: SharedSegments, reader: SharedSegments, data: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """One gather of ``data`` from the writer to the reader: what the reader sees, and whether a segment grew."""
    buffer, generation = writer.writable(data.numel())
    assert buffer is not None
    buffer.copy_(data)
    seen = reader.readable(0, generation, data.numel()).clone()
    grew = writer.grew
    assert reader.grew == grew  # both processes agree
    writer.end()
    reader.end()
    return seen, grew


def test_the_reader_sees_the_writers_bytes_and_the_names_go_once_mapped():
    writer, reader = pair()
    data = torch.randint(0, 256, (1000,), dtype=torch.uint8)
    buffer, generation = writer.writable(data.numel())
    buffer.copy_(data)
    assert files(writer.token) == {f"fedhet-{writer.token}-r0-s0-g1"}
    assert torch.equal(reader.readable(0, generation, data.numel()), data)
    writer.end()
    assert files(writer.token) == set()  # removed, and the mapping still holds the bytes
    assert torch.equal(reader.readable(0, generation, data.numel()), data)
    writer.close()
    reader.close()


def test_gathers_alternate_between_two_segments_that_are_reused_and_grow():
    writer, reader = pair()
    small = [torch.full((100,), i, dtype=torch.uint8) for i in range(4)]
    grown = [gather(writer, reader, data)[1] for data in small]
    assert grown == [True, True, False, False]  # one segment per slot, then reused
    for i, data in enumerate(small):
        assert torch.equal(gather(writer, reader, data)[0], data), i
    big = torch.randint(0, 256, ((1 << 20) + 1,), dtype=torch.uint8)  # more than the first segment's 1 MiB
    seen, grew = gather(writer, reader, big)
    assert grew
    assert torch.equal(seen, big)
    assert torch.equal(gather(writer, reader, small[0])[0], small[0])  # the other slot kept its size
    assert files(writer.token) == set()
    writer.close()
    reader.close()


def test_no_room_in_dev_shm_falls_back_and_leaves_no_file(monkeypatch):
    writer, _ = pair()

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shared_memory.os, "posix_fallocate", full)
    assert writer.writable(10) == (None, -1)
    assert files(writer.token) == set()


def test_close_removes_a_segment_whose_gather_did_not_end():
    writer, _ = pair()
    writer.writable(10)
    assert files(writer.token)
    writer.close()
    assert files(writer.token) == set()


def control_pair() -> tuple[SharedSegments, SharedSegments]:
    """Rank 0 and rank 1 of one run with a control block (rank 0 makes its file, rank 1 maps it)."""
    token = secrets.token_hex(6)
    first = SharedSegments(token, 0, world_size=2, control=True)
    second = SharedSegments(token, 1, world_size=2, control=True)
    first.control_mapped()
    return first, second


def test_exchange_gives_every_process_the_places_of_the_same_gather():
    segments = control_pair()
    assert files(segments[0].token) == set()  # the control block's name went once both had mapped it
    seen: dict[int, list[list[tuple[int, int]]]] = {0: [], 1: []}

    def run(rank: int) -> None:
        for gather in range(300):  # each side runs ahead whenever it can: the slots must keep gathers apart
            seen[rank].append(segments[rank].exchange(1000 * gather + rank, gather % 7 - 1))
            segments[rank].end()

    threads = [threading.Thread(target=run, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    expected = [[(1000 * g, g % 7 - 1), (1000 * g + 1, g % 7 - 1)] for g in range(300)]
    assert seen[0] == expected
    assert seen[1] == expected
    for side in segments:
        side.close()


def test_exchange_asks_whether_the_others_live_and_gives_up_after_its_timeout():
    alone, other = control_pair()
    checks = []
    with pytest.raises(TimeoutError, match=r"ranks \[1\] did not reach gather 1"):
        alone.exchange(10, 1, check=lambda: checks.append(1), timeout_s=0.6)
    assert checks  # asked at least once before giving up

    def gone() -> None:
        raise RuntimeError("rank 1 (pid 42) was killed by SIGKILL")

    with pytest.raises(RuntimeError, match="SIGKILL"):
        alone.exchange(10, 1, check=gone, timeout_s=30)
    alone.close()
    other.close()


def test_exchange_needs_a_control_block():
    writer, reader = pair()
    assert not writer.has_control
    with pytest.raises(RuntimeError, match="control block"):
        writer.exchange(1, 1)
