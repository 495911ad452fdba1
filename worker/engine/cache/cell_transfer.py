"""KV cells moved between slots and host memory: a slot's cells saved before another prompt drops them, loaded back
when a prompt continues them, and one slot's stream copied into another.

llama.cpp carries out a stream copy only at the next llama_decode, so until then the two slots' bytes are not what
their cells will hold: such slots are neither saved to host memory nor loaded into (`decoded` ends that state).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import structlog

from worker.engine.cache.host_cache import MIB, SavedCells
from worker.engine.cache.prefix_cache import PrefixCache
from worker.engine.native.model import LlamaModel

log = structlog.get_logger(__name__)


class CellTransfer:
    def __init__(self, model: LlamaModel, cache: PrefixCache) -> None:
        self.model = model
        self.cache = cache
        self._copying: set[int] = set()  # slots in a stream copy llama.cpp has not carried out yet

    def copy(self, source: int, target: int) -> None:
        """Copy the source slot's whole stream into the target (llama.cpp does it before the next decode)."""
        llama_cpp.llama_memory_seq_cp(self.model.memory, source, target, -1, -1)
        self._copying.update((source, target))

    def decoded(self) -> None:
        """A llama_decode ran: the copies asked for before it are done."""
        self._copying.clear()

    def save_dropped(self, slot: int, kept: int) -> None:
        """Save the cells a request taking `slot` drops (all past its first `kept`) to host memory, if worth it."""
        host, record = self.cache.host, self.cache.worth_saving(slot, kept)
        if host is None or record is None or slot in self._copying:  # (no host cache: nothing is worth saving)
            return
        llama_cpp.llama_memory_seq_rm(self.model.memory, slot, len(record.tokens), -1)  # only what may be reused
        size = llama_cpp.llama_state_seq_get_size(self.model.ctx, slot)
        try:
            data = (ctypes.c_uint8 * size)()
        except MemoryError:  # the machine has less to spare than --cache-ram says: hold less from now on
            host.shrink()
            log.warning("cache_ram_reduced", limit_mib=host.limit_bytes // MIB, bytes_not_saved=size)
            return
        if size and llama_cpp.llama_state_seq_get_data(self.model.ctx, data, size, slot) == size:
            host.add(SavedCells(record.tokens, record.exact, data, record.adapters))
            log.debug("cells_saved", slot=slot, cells=len(record.tokens), bytes=size)

    def restore(self, slot: int, saved: SavedCells, reuse: int) -> int:
        """Load saved cells into `slot`: the cells the slot then reuses, `reuse` (0 where it cannot). llama.cpp
        empties the slot before loading, and again if the load fails."""
        if slot not in self._copying and \
                llama_cpp.llama_state_seq_set_data(self.model.ctx, saved.data, saved.size, slot) == saved.size:
            log.debug("cells_restored", slot=slot, cells=len(saved.tokens), bytes=saved.size)
            return reuse
        host = self.cache.host
        assert host is not None  # saved cells come from the host cache
        host.add(saved)  # still whole in host memory: another prompt may find it
        return 0
