"""Where the engine keeps every client's personal state between its rounds, in memory up to a budget, then on disk."""

from __future__ import annotations

import shutil
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from torch import Tensor

from fedhet.core import ClientState


def state_bytes(state: ClientState) -> int:
    """Bytes of the tensors in a client's state (personal tensors and optimizer state)."""
    sizes: list[int] = []
    apply_to_collection(state.state_dict(), Tensor, lambda t: sizes.append(t.numel() * t.element_size()))
    return sum(sizes)


class ClientStore(MutableMapping[str, ClientState]):
    """A ``client_id -> ClientState`` mapping that spills least-recently-used states to disk past a memory budget.

    With ``memory_budget_bytes=None`` it is a plain in-memory dict. With a budget, the states held in memory never
    total more than the budget (a single state larger than it is still held while in use): each write or read makes
    its client the most recent one, and the least recently used states are written to ``spill_dir`` (one
    ``torch.save`` file per client, loaded back with ``weights_only=True``) until the rest fits. A spilled state is
    read back on its next access and its file removed, so memory grows with the budget, not with the federation.

    Args:
        memory_budget_bytes: most bytes of client state held in memory; ``None`` for no limit.
        spill_dir: folder for spilled states (created when first needed, emptied on :meth:`clear`).

    Example:
        >>> import tempfile
        >>> store = ClientStore(memory_budget_bytes=64, spill_dir=tempfile.mkdtemp())
        >>> for cid in "abc":
        ...     store[cid] = ClientState({"w": torch.zeros(8)})  # 32 bytes each
        >>> store.memory_bytes, store.num_spilled
        (64, 1)
        >>> float(store["a"].personal["w"].sum()), store.num_spilled  # read back from disk; "b" goes out instead
        (0.0, 1)

    """

    def __init__(self, memory_budget_bytes: int | None = None, spill_dir: str | Path | None = None) -> None:
        if memory_budget_bytes is not None and memory_budget_bytes < 0:
            raise ValueError(f"ClientStore: field 'memory_budget_bytes' must be >= 0, got {memory_budget_bytes}")
        if memory_budget_bytes is not None and spill_dir is None:
            raise ValueError("ClientStore: a memory budget needs a 'spill_dir' to write the states that do not fit")
        self.memory_budget_bytes = memory_budget_bytes
        self.spill_dir = Path(spill_dir) if spill_dir is not None else None
        self._memory: OrderedDict[str, ClientState] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._spilled: set[str] = set()
        self.memory_bytes = 0

    @property
    def num_spilled(self) -> int:
        """Number of client states currently on disk."""
        return len(self._spilled)

    def _path(self, client_id: str) -> Path:
        assert self.spill_dir is not None
        return self.spill_dir / f"{client_id.encode().hex()}.pt"

    def __setitem__(self, client_id: str, state: ClientState) -> None:
        self._forget(client_id)
        self._memory[client_id] = state
        self._sizes[client_id] = size = state_bytes(state) if self.memory_budget_bytes is not None else 0
        self.memory_bytes += size
        self._evict(keep=client_id)

    def __getitem__(self, client_id: str) -> ClientState:
        if client_id in self._memory:
            self._memory.move_to_end(client_id)
            return self._memory[client_id]
        if client_id not in self._spilled:
            raise KeyError(client_id)
        path = self._path(client_id)
        state = ClientState.from_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        self._spilled.discard(client_id)
        path.unlink()
        self[client_id] = state
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
        """Drop every state, in memory and on disk."""
        self._memory.clear()
        self._sizes.clear()
        self._spilled.clear()
        self.memory_bytes = 0
        if self.spill_dir is not None and self.spill_dir.exists():
            shutil.rmtree(self.spill_dir)

    def state_dicts(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(client_id, ClientState.state_dict())`` for every client, reading spilled ones without reloading them."""
        for client_id in list(self._memory):
            yield client_id, self._memory[client_id].state_dict()
        for client_id in sorted(self._spilled):
            yield client_id, torch.load(self._path(client_id), map_location="cpu", weights_only=True)

    def _forget(self, client_id: str) -> None:
        if client_id in self._memory:
            del self._memory[client_id]
            self.memory_bytes -= self._sizes.pop(client_id)
        elif client_id in self._spilled:
            self._spilled.discard(client_id)
            self._path(client_id).unlink(missing_ok=True)

    def _evict(self, keep: str) -> None:
        if self.memory_budget_bytes is None:
            return
        while self.memory_bytes > self.memory_budget_bytes and len(self._memory) > 1:
            client_id = next(iter(self._memory))
            if client_id == keep:
                self._memory.move_to_end(client_id)
                continue
            state = self._memory.pop(client_id)
            self.memory_bytes -= self._sizes.pop(client_id)
            self.spill_dir.mkdir(parents=True, exist_ok=True)
            torch.save(state.state_dict(), self._path(client_id))
            self._spilled.add(client_id)
