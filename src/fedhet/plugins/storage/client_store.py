"""Where the engine keeps every client's personal state between its rounds, in memory up to a budget, then on disk."""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any, cast

import torch
from filelock import FileLock
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor

from fedhet.core import ClientState
from fedhet.plugins.storage.files import atomic_torch_save, hashed_name, try_lock

log = logging.getLogger(__name__)

_OWN_FILE = re.compile(r"\.?[0-9a-f]{64}\.pt(\..*\.tmp)?")  # spilled states and their temporary files


def state_bytes(state: ClientState) -> int:
    """Bytes of the tensors in a client's state (personal tensors and optimizer state)."""
    sizes: list[int] = []
    apply_to_collection(state.state_dict(), Tensor, lambda t: sizes.append(t.numel() * t.element_size()))
    return sum(sizes)


def spill_name(client_id: str) -> str:
    """The file name of a client's spilled state: a SHA-256 of its id, valid and 67 characters long for any id."""
    return hashed_name(client_id) + ".pt"


def _remove_states(folder: Path) -> None:
    """Delete the spilled states (and their temporary files) in ``folder``, then the folder if that empties it."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if _OWN_FILE.fullmatch(path.name) and path.is_file():
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # something else is in it: not ours to delete
        folder.rmdir()


def _release(lock: FileLock, folder: Path, remove: bool) -> None:
    """Unlock ``folder`` and delete its lock file; with ``remove``, first delete its states and the folder (if emptied).

    A folder kept (``remove=False``) is left without a lock file, which tells it from the folder of a killed store
    (its lock file left behind, free): :func:`remove_dead_spills` deletes only the latter.
    """
    if remove:
        _remove_states(folder)
    lock.release()
    Path(lock.lock_file).unlink(missing_ok=True)


def _lock_file(spill_dir: Path) -> Path:
    """``<spill_dir>.lock`` beside the folder: held by the store that owns it."""
    return spill_dir.with_name(spill_dir.name + ".lock")


def remove_dead_spills(folder: Path) -> list[Path]:
    """Delete the spill folders in ``folder`` (a run's ``client_state/``) whose store was killed, and their lock files.

    A store killed while it held its spill folder (a SIGKILLed run) leaves the folder and its lock file, free; a
    living store holds its lock, and a store closed with ``keep_spilled`` leaves no lock file: both are left alone.

    Returns:
        the spill folders deleted.

    """
    removed: list[Path] = []
    for lock_file in sorted(folder.glob("*.lock")) if folder.is_dir() else []:
        lock = try_lock(lock_file)
        if lock is not None:
            spill_dir = lock_file.with_name(lock_file.name.removesuffix(".lock"))
            _release(lock, spill_dir, remove=True)
            removed.append(spill_dir)
    if removed:
        log.info("removed the spill folders of killed runs: %s", ", ".join(str(path) for path in removed))
    return removed


class ClientStore(MutableMapping[str, ClientState]):
    """A ``client_id -> ClientState`` mapping that spills least-recently-used states to disk past a memory budget.

    With ``memory_budget_bytes=None`` it is a plain in-memory dict. With a budget, the states held in memory never
    total more than the budget (a single state larger than it is still held while in use): each write or read makes
    its client the most recent one, and the least recently used states are written to ``spill_dir`` until the rest
    fits. A spilled state is read back on its next access, so memory grows with the budget, not with the federation.

    Nothing is lost on an I/O error: a state is written to a temporary file, fsynced and renamed before its memory copy
    is dropped, and its file is deleted only once the state is back in memory. If a state cannot be written (full
    disk, read-only folder), it stays in memory (a warning says so once) and the budget is exceeded; if a spilled
    state cannot be read, the error names its client and the file is kept. Files are named by a hash of the client id
    (:func:`spill_name`), so every id can spill.

    The store owns ``spill_dir``: when created it locks it (through ``<spill_dir>.lock`` beside it; a second store, in
    this process or another, on the same folder is refused) and deletes the states a killed earlier owner left in it;
    on :meth:`close` (called when the store is garbage collected or the process exits) it deletes its states and
    the folder if that empties it, unless ``keep_spilled``, and its lock file. A resumed run deletes the folders that
    killed stores left (:func:`remove_dead_spills`). It never deletes a file it did not name.

    Args:
        memory_budget_bytes: most bytes of client state held in memory; ``None`` for no limit.
        spill_dir: the folder this store owns for spilled states (one per run and process).
        keep_spilled: leave ``spill_dir`` and its files on disk when the store is closed.

    Raises:
        RuntimeError: if another store holds ``spill_dir``.

    Example:
        >>> import tempfile
        >>> store = ClientStore(memory_budget_bytes=64, spill_dir=tempfile.mkdtemp())
        >>> for cid in "abc":
        ...     store[cid] = ClientState({"w": torch.zeros(8)})  # 32 bytes each
        >>> store.memory_bytes, store.num_spilled
        (64, 1)
        >>> float(store["a"].personal["w"].sum()), store.num_spilled  # read back from disk; "b" goes out instead
        (0.0, 1)
        >>> store.close()  # the spill folder is removed

    """

    def __init__(
        self,
        memory_budget_bytes: int | None = None,
        spill_dir: str | Path | None = None,
        keep_spilled: bool = False,
    ) -> None:
        if memory_budget_bytes is not None and memory_budget_bytes < 0:
            raise ValueError(f"ClientStore: field 'memory_budget_bytes' must be >= 0, got {memory_budget_bytes}")
        if memory_budget_bytes is not None and spill_dir is None:
            raise ValueError("ClientStore: a memory budget needs a 'spill_dir' to write the states that do not fit")
        self.memory_budget_bytes = memory_budget_bytes
        self.spill_dir = Path(spill_dir) if spill_dir is not None else None
        self.keep_spilled = keep_spilled
        self._memory: OrderedDict[str, ClientState] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._spilled: set[str] = set()
        self._spill_failed = False
        self.memory_bytes = 0
        self._finalizer: weakref.finalize[[FileLock, Path, bool], ClientStore] | None = None
        if memory_budget_bytes is not None:
            self._claim()

    @classmethod
    def with_budget(cls, budget_mb: float | None, spill_dir: str | Path, keep_spilled: bool = False) -> ClientStore:
        """A store keeping at most ``budget_mb`` MiB in memory, spilling to ``spill_dir``; ``None``: all in memory."""
        if budget_mb is None:
            return cls()
        return cls(int(budget_mb * 2**20), spill_dir, keep_spilled=keep_spilled)

    def _claim(self) -> None:
        """Lock ``spill_dir`` for this store and empty it of what a dead earlier owner left."""
        assert self.spill_dir is not None
        self.spill_dir.parent.mkdir(parents=True, exist_ok=True)
        lock = try_lock(_lock_file(self.spill_dir))
        if lock is None:
            raise RuntimeError(
                f"ClientStore: spill folder {str(self.spill_dir)!r} is in use by another client store (another fedhet"
                " run, or another trainer in this process); give each run its own folder"
            )
        _remove_states(self.spill_dir)  # left by a killed earlier owner of this folder: the checkpoint is the truth
        self._finalizer = weakref.finalize(self, _release, lock, self.spill_dir, not self.keep_spilled)

    @property
    def num_spilled(self) -> int:
        """Number of client states currently on disk."""
        return len(self._spilled)

    def in_memory(self) -> dict[str, ClientState]:
        """The states held in memory now (not the spilled ones), by client id, least recently used first.

        A copy of the index: reading it neither reorders the states nor reads spilled ones back.
        """
        return dict(self._memory)

    def path_of(self, client_id: str) -> Path:
        """The file that holds ``client_id``'s state while it is spilled."""
        if self.spill_dir is None:
            raise ValueError("ClientStore: this store has no 'spill_dir'")
        return self.spill_dir / spill_name(client_id)

    def __setitem__(self, client_id: str, state: ClientState) -> None:
        self._forget(client_id)
        self._hold(client_id, state)
        self._evict(keep=client_id)

    def __getitem__(self, client_id: str) -> ClientState:
        if client_id in self._memory:
            self._memory.move_to_end(client_id)
            return self._memory[client_id]
        if client_id not in self._spilled:
            raise KeyError(client_id)
        state = ClientState.from_state_dict(self._read(client_id))
        self._spilled.discard(client_id)
        self._hold(client_id, state)
        self.path_of(client_id).unlink(missing_ok=True)  # only now that the state is back in memory
        self._evict(keep=client_id)
        return state

    def __delitem__(self, client_id: str) -> None:
        if client_id not in self:
            raise KeyError(client_id)
        self._forget(client_id)

    def __contains__(self, client_id: object) -> bool:
        return client_id in self._memory or client_id in self._spilled

    def __iter__(self) -> Iterator[str]:
        yield from list(self._memory)
        yield from sorted(self._spilled)

    def __len__(self) -> int:
        return len(self._memory) + len(self._spilled)

    def clear(self) -> None:
        """Drop every state, in memory and on disk (this store's files, and ``spill_dir`` if that empties it)."""
        if self.spill_dir is not None and self.memory_budget_bytes is not None:
            _remove_states(self.spill_dir)
        self._memory.clear()
        self._sizes.clear()
        self._spilled.clear()
        self.memory_bytes = 0

    def close(self) -> None:
        """Drop every state from memory and release ``spill_dir``, removing its files unless ``keep_spilled``."""
        self._memory.clear()
        self._sizes.clear()
        self._spilled.clear()
        self.memory_bytes = 0
        if self._finalizer is not None:
            self._finalizer()

    def state_dicts(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(client_id, ClientState.state_dict())`` for every client, reading spilled ones without reloading them."""
        for client_id in list(self._memory):
            yield client_id, self._memory[client_id].state_dict()
        for client_id in sorted(self._spilled):
            yield client_id, self._read(client_id)

    def _read(self, client_id: str) -> dict[str, Any]:
        path = self.path_of(client_id)
        try:
            return cast(dict[str, Any], torch.load(path, map_location="cpu", weights_only=True))
        except Exception as err:
            raise RuntimeError(
                f"client '{client_id}': its spilled state {str(path)!r} could not be read back"
                f" ({type(err).__name__}: {err}); the file is kept"
            ) from err

    def _hold(self, client_id: str, state: ClientState) -> None:
        self._memory[client_id] = state
        self._sizes[client_id] = size = state_bytes(state) if self.memory_budget_bytes is not None else 0
        self.memory_bytes += size

    def _forget(self, client_id: str) -> None:
        if client_id in self._memory:
            del self._memory[client_id]
            self.memory_bytes -= self._sizes.pop(client_id)
        elif client_id in self._spilled:
            self._spilled.discard(client_id)
            self.path_of(client_id).unlink(missing_ok=True)

    def _evict(self, keep: str) -> None:
        """Spill least recently used states (never ``keep``) until the rest fits; stop at the first write that fails."""
        if self.memory_budget_bytes is None or self.spill_dir is None:  # __init__ pairs a budget with a folder
            return
        while self.memory_bytes > self.memory_budget_bytes and len(self._memory) > 1:
            client_id = next(iter(self._memory))
            if client_id == keep:
                self._memory.move_to_end(client_id)
                continue
            try:
                self.spill_dir.mkdir(exist_ok=True)
                atomic_torch_save(self._memory[client_id].state_dict(), self.path_of(client_id))
            except Exception as err:  # the state stays in memory: over budget rather than lost
                if not self._spill_failed:
                    log.warning("client store: cannot write states to %s (%s: %s); keeping them in memory, over the"
                                " memory budget", self.spill_dir, type(err).__name__, err)  # fmt: skip
                    self._spill_failed = True
                return
            del self._memory[client_id]  # only now that its file is complete
            self.memory_bytes -= self._sizes.pop(client_id)
            self._spilled.add(client_id)
