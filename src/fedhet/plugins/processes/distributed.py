"""Client-parallel execution: which process trains which client, and gathering what they produce.

Gathering is a tensor collective, not a pickle of tensors: :func:`pack_object` pickles an object's skeleton with every
plain dense tensor replaced by a reference into one flat byte buffer that holds the tensors' bytes back to back; the
processes of one CPU machine write their buffers into shared memory and tell each other only the buffers' lengths
(through a shared-memory control block on x86-64, else an ``all_gather``), others exchange the buffers too (a
``broadcast`` from each process); :func:`unpack_object` rebuilds each other process's object, copying each tensor out
of its buffer. Gathering every client's upload thus costs two memory copies of the uploads (plus the transfer between
machines), instead of pickling them.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import pickle
import secrets
import signal
import time
import weakref
from collections.abc import Iterator
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from lightning.fabric.plugins.environments.lsf import LSFEnvironment
from lightning.fabric.plugins.environments.mpi import MPIEnvironment
from lightning.fabric.plugins.environments.slurm import SLURMEnvironment
from lightning.fabric.plugins.environments.torchelastic import TorchElasticEnvironment
from torch import Tensor

from fedhet.plugins.processes.shared_memory import SharedSegments, ordered_stores, shared_memory_available

T = TypeVar("T")

log = logging.getLogger(__name__)
_launcher_pid = os.getppid()  # on a child process that Lightning's launcher ran: rank 0's pid

_ALIGN = 16  # bytes; every tensor starts at a multiple of it (the largest element size), so its view is aligned
_HEADER = 8  # bytes: the skeleton's length, little-endian
_TENSOR_REF = "fedhet.tensor"


def destroy_process_group_at_exit() -> None:
    """Destroy the process group when the interpreter exits (the handler is registered once per process).

    A gloo group left to the interpreter's own final clean-up can abort a process at exit ("terminate called without
    an active exception", exit status 134) after a run that finished and wrote its results; destroying it in an
    ``atexit`` handler, before that clean-up, ends every process with status 0. The group stays usable until the
    process exits, so ``test`` or ``export`` after ``fit`` in the same process still work.
    """
    global _exit_handler_registered
    if not _exit_handler_registered:
        atexit.register(_destroy_process_group)
        _exit_handler_registered = True


_exit_handler_registered = False


def _destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def note_launcher_pid(pid: int) -> None:
    """Record ``pid`` as the process that launched this one (a forked child's rank 0), for :func:`_who_died`."""
    global _launcher_pid
    _launcher_pid = pid


def owner_rank(client_index: int, world_size: int) -> int:
    """The process that trains and keeps the state of the ``client_index``-th client (round-robin)."""
    return client_index % world_size


def check_multi_node_launch(num_nodes: int) -> None:
    """Refuse ``num_nodes > 1`` in a process that no multi-node launcher started, instead of waiting forever.

    A run over several machines starts one command per machine through a launcher that tells each process its place:
    torchrun (or ``fabric run``, which uses it), SLURM's ``srun``, LSF's ``jsrun``, MPI, or Lightning's own variables
    (``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) set by hand on each machine. Without one, the process would wait
    for machines that never join.

    Args:
        num_nodes: the trainer's ``num_nodes``.

    Raises:
        ValueError: ``num_nodes > 1`` and none of those launchers is detected.

    """
    if num_nodes <= 1 or "NODE_RANK" in os.environ:
        return
    if any(env.detect() for env in (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)):
        return
    raise ValueError(
        f"FederatedTrainer: field 'num_nodes' is {num_nodes}, but no multi-node launcher started this process; run"
        " the same command on every machine through torchrun (--nnodes), srun (SLURM) or `fabric run`, or set"
        " NODE_RANK, MASTER_ADDR and MASTER_PORT on each (see docs/multi-node.md)"
    )


def _aligned(num_bytes: int) -> int:
    return -(-num_bytes // _ALIGN) * _ALIGN


class _TensorPickler(pickle.Pickler):
    """Pickles an object with each plain dense tensor replaced by ``(ref, offset, dtype, shape)``; keeps the tensors.

    Offsets are in bytes from the start of the tensor data. Other tensors (parameters, tensors that require grad,
    sparse or quantized ones, tensor subclasses) are pickled as usual.
    """

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.tensors: list[tuple[int, Tensor]] = []
        self.data_bytes = 0

    def persistent_id(self, obj: Any) -> tuple[str, int, torch.dtype, tuple[int, ...]] | None:
        if type(obj) is not Tensor or obj.layout is not torch.strided or obj.is_quantized or obj.requires_grad:
            return None
        offset = self.data_bytes
        self.tensors.append((offset, obj))
        self.data_bytes = _aligned(offset + obj.nbytes)
        return _TENSOR_REF, offset, obj.dtype, tuple(obj.shape)


class _TensorUnpickler(pickle.Unpickler):
    """Rebuilds what :class:`_TensorPickler` wrote, each tensor reference a copy of its bytes in ``data``."""

    def __init__(self, file: io.BytesIO, data: Tensor) -> None:
        super().__init__(file)
        self.data = data

    def persistent_load(self, pid: Any) -> Tensor:
        ref, offset, dtype, shape = pid
        if ref != _TENSOR_REF:
            raise pickle.UnpicklingError(f"unknown persistent id {ref!r}")
        # a copy, not a view: a tensor kept past the round (by a callback) or saved on its own must not hold on to,
        # or be saved with, the whole buffer
        return self.data[offset : offset + torch.Size(shape).numel() * dtype.itemsize].view(dtype).view(shape).clone()


def pack_object(obj: Any) -> Tensor:
    """One flat byte buffer holding ``obj``: its pickled skeleton, then the bytes of its plain dense tensors.

    Layout: 8 bytes with the skeleton's length ``S`` (little-endian), the skeleton, zero padding to a multiple of 16
    bytes, then each tensor's bytes in pickling order, each starting at a multiple of 16 bytes. Tensors on any device
    are copied (once) into the buffer; non-contiguous ones are made contiguous by that copy. Tensors that share
    memory are stored (and come back) as separate tensors.

    Args:
        obj: any picklable object.

    Returns:
        A CPU ``uint8`` tensor of shape ``(B,)``, ``B`` a multiple of 16, that :func:`unpack_object` turns back into
        ``obj``.

    Example:
        >>> obj = {"w": torch.arange(6.0).reshape(2, 3), "n": 3}
        >>> back = unpack_object(pack_object(obj))
        >>> back["n"], torch.equal(back["w"], obj["w"])
        (3, True)

    """
    packing = _Packing(obj)
    return packing.fill(torch.empty(packing.num_bytes, dtype=torch.uint8))


class _Packing:
    """An object pickled for :func:`pack_object`: its size in bytes is known before a buffer is chosen to fill."""

    def __init__(self, obj: Any) -> None:
        skeleton = io.BytesIO()
        self._pickler = _TensorPickler(skeleton)
        self._pickler.dump(obj)
        self._head = bytearray(len(skeleton.getbuffer()).to_bytes(_HEADER, "little")) + skeleton.getbuffer()
        self._start = _aligned(len(self._head))
        self.num_bytes = self._start + self._pickler.data_bytes

    def fill(self, buffer: Tensor) -> Tensor:
        """Write the packed object into ``buffer`` (a CPU ``uint8`` tensor of shape ``(num_bytes,)``) and return it."""
        head, start = self._head, self._start
        buffer[: len(head)] = torch.frombuffer(head, dtype=torch.uint8)
        buffer[len(head) : start] = 0  # padding is zeroed: the same object always gives the same bytes
        for offset, tensor in self._pickler.tensors:
            begin, end = start + offset, start + offset + tensor.nbytes
            buffer[begin:end].view(tensor.dtype).view(tensor.shape).copy_(tensor)
            buffer[end : start + _aligned(offset + tensor.nbytes)] = 0
        return buffer


def unpack_object(buffer: Tensor) -> Any:
    """The object that :func:`pack_object` wrote into ``buffer`` (trailing padding is ignored).

    Args:
        buffer: a CPU ``uint8`` tensor of shape ``(B',)``, ``B' >= B``, whose first ``B`` bytes are a packed object.

    Returns:
        The object, its tensors contiguous CPU tensors with their dtypes and shapes, each with its own memory.

    """
    length = int.from_bytes(buffer[:_HEADER].numpy().tobytes(), "little")
    head = buffer[_HEADER : _HEADER + length].numpy().tobytes()
    data = buffer[_aligned(_HEADER + length) :]
    return _TensorUnpickler(io.BytesIO(head), data).load()


def gather_objects(fabric: Fabric, obj: T) -> list[T]:
    """Every process's ``obj``, in rank order, on every process (identity on one process).

    The objects travel as :func:`pack_object` buffers. Between the CPU processes of one machine each buffer is
    written into a shared-memory segment (:mod:`fedhet.plugins.processes.shared_memory`), each buffer's length and
    segment go through the run's shared-memory control block (:meth:`SharedSegments.exchange
    <fedhet.plugins.processes.shared_memory.SharedSegments.exchange>`; an ``all_gather`` where stores may be reordered),
    and the others read it in place. Otherwise (several machines, NCCL, or no room in
    ``/dev/shm``) one ``all_gather`` of the lengths, then one ``broadcast`` from each process of its buffer (on the
    process's device with NCCL): per-process broadcasts move the same bytes as an ``all_gather`` without padding every
    buffer to the longest, and with gloo on 2 CPU processes take half the time of its ``all_gather`` (5 against 9-10 ms
    for 6.4 MB each); shared memory took ~1 ms for those bytes.

    Args:
        fabric: the run's Fabric.
        obj: this process's object.

    Returns:
        ``world_size`` objects: this process's ``obj`` itself at its rank, the others rebuilt by :func:`unpack_object`
        (their tensors on the CPU, in memory of their own).

    """
    if fabric.world_size == 1:
        return [obj]
    rank = dist.get_rank()
    nccl = dist.get_backend() == dist.Backend.NCCL
    segments = None if nccl else _shared_segments(fabric)
    packing = _Packing(obj)
    buffer, generation = segments.writable(packing.num_bytes) if segments is not None else (None, -1)
    buffer = packing.fill(buffer if buffer is not None else torch.empty(packing.num_bytes, dtype=torch.uint8))
    device = fabric.device if nccl else torch.device("cpu")
    buffer = buffer.to(device)
    try:
        with _collective(fabric):
            places = _places(fabric, segments, packing.num_bytes, generation, device)
            buffers: list[Tensor] = []
            for r, (n, g) in enumerate(places):
                if r == rank:
                    buffers.append(buffer)
                elif segments is not None and g >= 0:  # in shared memory: read in place
                    buffers.append(segments.readable(r, g, n))
                else:
                    buffers.append(buffer.new_empty(n))
            for src, (_, g) in enumerate(places):
                if g < 0:  # not in shared memory: through the process group
                    dist.broadcast(buffers[src], src=src)
            gathered = [obj if r == rank else unpack_object(b.cpu()) for r, b in enumerate(buffers)]
            if segments is not None and segments.grew:
                dist.barrier()  # every process has mapped the new segments: their names can go
    finally:
        if segments is not None:
            segments.end()
    return gathered


_segments: weakref.WeakKeyDictionary[Fabric, SharedSegments | None] = weakref.WeakKeyDictionary()


def _shared_segments(fabric: Fabric) -> SharedSegments | None:
    """The run's shared-memory segments when its processes share one machine, else ``None``.

    Decided and named at the run's first gather, then kept: later gathers make no check and no system call here.
    """
    if fabric not in _segments:
        segments = None
        if getattr(getattr(fabric, "strategy", None), "num_nodes", 1) == 1 and shared_memory_available():
            rank, world_size, control = dist.get_rank(), dist.get_world_size(), ordered_stores()
            token = [secrets.token_hex(6) if rank == 0 else None]
            if rank == 0:  # makes the control block's file before the others look for it
                segments = SharedSegments(str(token[0]), rank, world_size, control)
            with _collective(fabric):
                dist.broadcast_object_list(token, src=0)
                if rank != 0:
                    segments = SharedSegments(str(token[0]), rank, world_size, control)
                dist.barrier()  # every process has mapped the control block: its name can go
            if rank == 0 and segments is not None:
                segments.control_mapped()
        _segments[fabric] = segments
    return _segments[fabric]


def _places(
    fabric: Fabric, segments: SharedSegments | None, num_bytes: int, generation: int, device: torch.device
) -> list[tuple[int, int]]:
    """Every process's ``(num_bytes, generation)`` for one gather: through the control block, else an ``all_gather``."""
    if segments is not None and segments.has_control:
        return segments.exchange(
            num_bytes, generation, check=lambda: _check_alive(fabric), timeout_s=_timeout_s(fabric)
        )
    info = torch.tensor([num_bytes, generation], dtype=torch.int64, device=device)
    infos = [torch.empty_like(info) for _ in range(fabric.world_size)]
    dist.all_gather(infos, info)
    return [(int(n), int(g)) for n, g in (i.tolist() for i in infos)]


def _timeout_s(fabric: Fabric) -> float:
    """The process group's timeout (Lightning's default, 30 minutes, when the strategy has none)."""
    timeout = getattr(fabric.strategy, "_timeout", None)
    return timeout.total_seconds() if timeout is not None else 1800.0


def _check_alive(fabric: Fabric) -> None:
    """Raise (as a lost collective does) when a child this process launched, or the rank 0 that launched it, is gone."""
    dead = _dead_processes(fabric)
    if dead is not None:
        raise RuntimeError(dead)


def barrier(fabric: Fabric) -> None:
    """``fabric.barrier()``, naming the process that died if another process is gone (see :func:`gather_objects`)."""
    with _collective(fabric):
        fabric.barrier()


@contextlib.contextmanager
def _collective(fabric: Fabric) -> Iterator[None]:
    """Turn a collective's failure (gloo's bare "Connection reset by peer") into an error naming the lost process."""
    try:
        yield
    except RuntimeError as err:
        error = RuntimeError(f"rank {fabric.global_rank}: lost the other processes of the run: {_who_died(fabric)}")
        log.error("%s (%s: %s)", error, type(err).__name__, err)  # at once: Lightning may kill this process soon
        raise error from err


def _who_died(fabric: Fabric, wait_s: float = 2.0) -> str:
    """Which process of the run is gone: a child this process launched, or (on a child) the launching rank 0."""
    deadline = time.monotonic() + wait_s
    while True:
        dead = _dead_processes(fabric)
        if dead is not None:
            return dead
        if not _children(fabric) or time.monotonic() > deadline:
            return "another process stopped or lost its connection (see that process's output)"
        time.sleep(0.05)


def _children(fabric: Fabric) -> list[Any]:
    """The processes this one launched (by Lightning's subprocess launcher or the fork launcher: its ranks 1..)."""
    return list(getattr(getattr(fabric.strategy, "launcher", None), "procs", None) or [])


def dead_children(children: list[Any]) -> str | None:
    """Which of the processes this one launched (its ranks ``1..``) failed, with how, or ``None``.

    Example:
        >>> class Killed:
        ...     pid, returncode = 7, -9
        ...     def poll(self):
        ...         return self.returncode
        >>> dead_children([Killed()])
        'rank 1 (pid 7) was killed by SIGKILL'

    """
    dead = [(rank, p) for rank, p in enumerate(children, start=1) if p.poll() is not None and p.returncode != 0]
    if not dead:
        return None
    return "; ".join(f"rank {rank} (pid {p.pid}) {_exit_text(p.returncode)}" for rank, p in dead)


def _dead_processes(fabric: Fabric) -> str | None:
    """Which child this process launched has failed, or whether the rank 0 that launched this one is gone; else None."""
    dead = dead_children(_children(fabric))
    if dead is not None:
        return dead
    if fabric.global_rank != 0 and os.getppid() != _launcher_pid:
        return f"rank 0 (pid {_launcher_pid}), which launched this process, is gone"
    return None


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"
