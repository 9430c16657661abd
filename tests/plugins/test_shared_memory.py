"""Shared-memory segments between processes of one machine: alternating slots, growth, removal, a full /dev/shm."""

import errno
import os
import secrets

import pytest
import torch

from fedhet.plugins import shared_memory
from fedhet.plugins.shared_memory import SharedSegments

pytestmark = pytest.mark.skipif(not shared_memory.shared_memory_available(), reason="needs /dev/shm (Linux)")


def pair() -> tuple[SharedSegments, SharedSegments]:
    """A writer (rank 0) and a reader (rank 1) of one run, in this process."""
    token = secrets.token_hex(6)
    return SharedSegments(token, 0), SharedSegments(token, 1)


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
