"""Gathering objects across processes as packed byte buffers: round trips, 2-process gathers (shared memory, gloo)."""

import os
import socket
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fedhet.core import ClientFailure, ClientUpdate
from fedhet.plugins.processes import distributed, shared_memory
from fedhet.plugins.processes.distributed import gather_objects, owner_rank, pack_object, unpack_object


def upload(client_id: str, seed: int) -> ClientUpdate:
    g = torch.Generator().manual_seed(seed)
    return ClientUpdate(
        client_id,
        10 + seed,
        shared={
            "w": torch.randn(3, 5, generator=g).t(),  # not contiguous
            "b": torch.randn(5, generator=g, dtype=torch.float64),
            "count": torch.tensor(seed, dtype=torch.int64),  # 0-dim
            "half": torch.randn(7, generator=g).to(torch.bfloat16),  # odd byte length: the next tensor is realigned
        },
        statistics={"mask": torch.rand(3, generator=g) > 0.5, "none": torch.zeros(0, 4), "z": torch.full((2,), 1 + 2j)},
        metrics={"loss": 0.5 + seed, "steps": 3.0},
    )


def assert_same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, ClientUpdate):
        assert_same(vars(a), vars(b))
    else:
        assert a == b


@pytest.mark.parametrize(
    "obj",
    [
        ([upload("a", 0), upload("b", 1)], [ClientFailure("c", "error", "boom")], 1234),
        ([], [], 0),  # a process with no clients
        [ClientUpdate("empty", 0, shared={})],  # an empty upload
        {"nothing": None, "x": 1.5, "s": "text"},  # no tensor at all
        torch.tensor([], dtype=torch.float16),
    ],
    ids=["uploads", "no-clients", "empty-upload", "no-tensors", "empty-tensor"],
)
def test_pack_unpack_round_trip(obj):
    buffer = pack_object(obj)
    assert buffer.dtype == torch.uint8
    assert buffer.dim() == 1
    assert buffer.numel() % 16 == 0
    assert_same(unpack_object(buffer), obj)
    padded = torch.cat([buffer, torch.full((48,), 7, dtype=torch.uint8)])  # trailing padding is ignored
    assert_same(unpack_object(padded), obj)


def test_tensors_travel_as_raw_bytes_and_come_back_in_their_own_memory():
    update = upload("a", 0)
    buffer = pack_object(update)
    payload = sum(t.nbytes for t in (*update.shared.values(), *update.statistics.values()))
    assert payload <= buffer.numel() < payload + 16 * 8 + 1024  # bytes + alignment + the pickled skeleton
    back = unpack_object(buffer)
    assert back.shared["w"].is_contiguous()
    tensors = [*back.shared.values(), *back.statistics.values()]
    storages = {t.untyped_storage().data_ptr() for t in tensors if t.numel()}
    assert len(storages) == sum(t.numel() > 0 for t in tensors)
    assert buffer.untyped_storage().data_ptr() not in storages
    assert all(t.untyped_storage().nbytes() == t.nbytes for t in tensors)  # a saved tensor saves only itself


def test_tensors_that_need_autograd_are_pickled_as_usual():
    obj = {"p": torch.nn.Parameter(torch.ones(2)), "g": torch.ones(3, requires_grad=True), "t": torch.arange(3)}
    back = unpack_object(pack_object(obj))
    assert isinstance(back["p"], torch.nn.Parameter)
    assert back["g"].requires_grad
    assert_same(back["t"], obj["t"])


def test_owner_rank_is_round_robin():
    assert [owner_rank(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


class _Fabric:
    """What gather_objects reads from a Fabric."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.device = torch.device("cpu")
        self.strategy = SimpleNamespace(num_nodes=1)


def _objects(rank: int) -> list:
    """What ``rank`` gathers, three times: its clients (rank 1 has none), then more than a 1 MiB segment holds."""
    mine = (
        ([upload("a", 0), upload("c", 2)], [ClientFailure("e", "non_finite", "nan")], 7) if rank == 0 else ([], [], 0)
    )
    big = {"w": torch.arange(600_000, dtype=torch.float32) + rank}  # 2.4 MB: the segments grow
    return [mine, big, (mine, big)]


def _gather_worker(rank: int, world_size: int, port: int, transport: str, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if transport == "process group":
        distributed.shared_memory_available = lambda: False
    elif transport == "mixed" and rank == 1:  # rank 1 finds no room in /dev/shm: its objects go through gloo
        shared_memory.SharedSegments.writable = lambda self, num_bytes: (None, -1)
    try:
        gathered = [gather_objects(_Fabric(world_size), obj) for obj in _objects(rank)]
        queue.put((rank, pack_object(gathered).numpy().tobytes()))  # bytes: no shared memory
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _segment_files() -> set[str]:
    root = shared_memory.SHM_ROOT
    return {p.name for p in root.glob("fedhet-*")} if root.is_dir() else set()


@pytest.mark.distributed
@pytest.mark.parametrize("transport", ["shared memory", "process group", "mixed"])
def test_gather_objects_on_two_processes(transport):
    before = _segment_files()
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    workers = mp.start_processes(
        _gather_worker, args=(2, free_port(), transport, queue), nprocs=2, join=False, start_method="spawn"
    )
    results = dict(queue.get() for _ in range(2))  # before joining: a worker blocks until its bytes are read
    while not workers.join():
        pass
    expected = [[a, b] for a, b in zip(_objects(0), _objects(1), strict=True)]
    for rank in (0, 1):
        assert_same(unpack_object(torch.frombuffer(bytearray(results[rank]), dtype=torch.uint8)), expected)
    assert _segment_files() == before  # every segment's name was removed once the others had mapped it


def test_gather_objects_is_identity_on_one_process():
    obj = {"w": torch.ones(2)}
    assert gather_objects(_Fabric(1), obj)[0] is obj


def test_the_same_object_always_packs_to_the_same_bytes():
    assert torch.equal(pack_object([upload("a", 0), upload("b", 1)]), pack_object([upload("a", 0), upload("b", 1)]))
