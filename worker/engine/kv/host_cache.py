"""Slots' cells kept in host memory when their slot goes to another prompt, restored when asked for again, as with
llama-server's --cache-ram: the same bytes come back, so exact mode's promise holds (docs/cache-and-exactness.md,
"More conversations than slots"; what a cell takes: docs/operations.md, "Memory")."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from worker.engine.kv.checkpoints import Checkpoint, kept
from worker.engine.media import text_end
from worker.engine.requests import NO_ADAPTERS, AdapterSet

MIB = 1 << 20


@dataclass(eq=False)
class SavedCells:
    tokens: list[int]  # what the cells hold, at positions 0..len-1
    exact: int  # of them, the leading cells made by aligned prefill (prefix_cache.SlotRecord.exact)
    data: ctypes.Array  # the slot's stream, as llama_state_seq_get_data wrote it
    adapters: AdapterSet = NO_ADAPTERS  # the LoRA adapters its cells were made under (prefix_cache.py)
    # A recurrent state's checkpoints (checkpoints.py): where a prompt sharing less than all the tokens goes on from.
    checkpoints: list[Checkpoint] = field(default_factory=list)

    @property
    def size(self) -> int:
        """The host memory it holds: the stream's bytes (len(data)) and its checkpoints'."""
        return len(self.data) + sum(checkpoint.size for checkpoint in self.checkpoints)

    def leading_text(self) -> SavedCells:
        """These cells as a file holds them: up to the first image's. An image's stand-ins are no llama_token (a
        file holds int32 ids), and no later process could tell which picture they stood for; the image's cells ride
        along in `data` and are dropped when loaded (CellTransfer.load), as cells past the reusable ones are."""
        end = text_end(self.tokens)
        if end == len(self.tokens):
            return self
        return SavedCells(self.tokens[:end], min(self.exact, end), self.data, self.adapters,
                          kept(self.checkpoints, end))


# Holds only cells the prefix cache may reuse in its mode (prefix_cache.worth_saving), the byte limit being
# --cache-ram. Dropped oldest first past the limit; an entry whose tokens begin another's is dropped for the longer
# one, and an entry leaves when it is restored (take()).
class HostCache:
    def __init__(self, limit_mib: int) -> None:
        self.limit_bytes = limit_mib * MIB
        self._entries: list[SavedCells] = []  # oldest first
        self.reserved_bytes = 0  # the slots' checkpoints (checkpoints.py), held within the same limit

    @property
    def entries(self) -> list[SavedCells]:
        return list(self._entries)

    @property
    def bytes_held(self) -> int:
        return sum(entry.size for entry in self._entries) + self.reserved_bytes

    def holds(self, tokens: list[int], adapters: AdapterSet = NO_ADAPTERS) -> bool:
        """Whether an entry already holds these tokens' cells, made under `adapters` (at the start of its own)."""
        return any(entry.tokens[:len(tokens)] == tokens and entry.adapters == adapters for entry in self._entries)

    def add(self, saved: SavedCells) -> None:
        if saved.size > self.limit_bytes:
            return
        tokens = saved.tokens
        kept = [entry for entry in self._entries
                if tokens[:len(entry.tokens)] != entry.tokens or entry.adapters != saved.adapters]
        self._entries = [*self._newest_within(kept, self.limit_bytes - self.reserved_bytes - saved.size), saved]

    def shrink(self) -> None:
        """Host memory ran out: hold at most 40 % of what is held now, dropping the oldest (as llama-server does)."""
        self.limit_bytes = max(1, int(0.4 * self.bytes_held))
        self._entries = self._newest_within(self._entries, self.limit_bytes - self.reserved_bytes)

    def reserve(self, checkpoints: int) -> None:
        """The slots' checkpoints now take `checkpoints` bytes: entries make room for them, oldest first."""
        self.reserved_bytes = checkpoints
        self._entries = self._newest_within(self._entries, self.limit_bytes - checkpoints)

    @staticmethod
    def _newest_within(entries: list[SavedCells], limit: int) -> list[SavedCells]:
        """The entries left once the oldest are dropped until the rest take at most `limit` bytes (a new list: the
        cache's is replaced whole, since /metrics reads it from another thread)."""
        total, first = sum(entry.size for entry in entries), 0
        while first < len(entries) and total > limit:
            total -= entries[first].size
            first += 1
        return entries[first:]

    def take(self, saved: SavedCells) -> None:
        """The entry goes back into a slot: it leaves the cache (the slot holds it now)."""
        self._entries = [entry for entry in self._entries if entry is not saved]
