"""KV cells moved between slots, host memory and files: a slot's cells saved before another prompt drops them,
loaded back when a prompt continues them, one slot's stream copied into another, and a free slot's cells taken for
a file (--kv-dir, POST /slots/{id}?action=save) or put back from one."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import llama_cpp
import structlog

from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.host_cache import MIB, SavedCells
from worker.engine.kv.prefix_cache import PrefixCache
from worker.engine.media import text_end
from worker.engine.native.model import LlamaModel
from worker.engine.positions import TOKENS, Positions

log = structlog.get_logger(__name__)

# llama_state_seq_*_ext's flag for a state without the attention cells: the recurrent part (and sliding windows).
PARTIAL_ONLY = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


class CellTransfer:
    def __init__(self, model: LlamaModel, cache: PrefixCache) -> None:
        self.model = model
        self.cache = cache
        self._copying: set[int] = set()  # slots in a stream copy llama.cpp has not carried out yet
        # Where each slot's tokens sit in positions: its last sequence's (a slot's cells are a prefix of its
        # tokens); files hold cells of text only (kv/host_cache.py: SavedCells.leading_text), one position a token.
        self._positions: dict[int, Positions] = {}

    def place(self, slot: int, positions: Positions) -> None:
        """The slot's tokens from now on sit at these positions: those of the sequence taking it, whose prompt shares
        the cells the slot keeps."""
        self._positions[slot] = positions

    def copy(self, source: int, target: int) -> None:
        """Copy the source slot's whole stream into the target. llama.cpp does it only at the next llama_decode:
        until then the two slots' bytes are not what their cells will hold, so they are neither saved nor loaded
        into (decoded() ends that state)."""
        llama_cpp.llama_memory_seq_cp(self.model.memory, source, target, -1, -1)
        self._copying.update((source, target))

    def positions(self, slot: int) -> Positions:
        return self._positions.get(slot, TOKENS)

    def cut(self, slot: int, start: int) -> bool:
        """Drop the slot's cells past its first `start` tokens' (all of them from 0); False where its memory refused
        the cut (a recurrent state: native/memory.py; a cut inside an M-RoPE image: positions.py) and holds what it
        held. Cuts are planned so that none is refused: a refusal is logged as the error it is."""
        position = self.positions(slot).cut(start)
        if position is not None and self.cut_at(slot, position):
            return True
        log.error("cut_refused", slot=slot, start=start, position=position, memory=self.model.memory_kind.cuts.value)
        return False

    def cut_at(self, slot: int, position: int) -> bool:
        """Drop the slot's cells from `position` on: a pass's rows, placed by position past the slot's cells."""
        return bool(llama_cpp.llama_memory_seq_rm(self.model.memory, slot, position, -1))

    def resume(self, slot: int, checkpoint: Checkpoint) -> bool:
        """Put a checkpoint's recurrent state back into the slot and cut its attention cells past the checkpoint's
        position, so the slot holds what it held there (llama.cpp restores the state but leaves the attention
        cells: unless cut, the next decode would read them, unrefused and wrong). False: llama.cpp refused it."""
        size = checkpoint.size
        if llama_cpp.llama_state_seq_set_data_ext(self.model.ctx, checkpoint.data, size, slot, PARTIAL_ONLY) != size:
            log.error("checkpoint_refused", slot=slot, pos=checkpoint.pos, bytes=size)
            return False
        return self.cut(slot, checkpoint.pos)

    def take_checkpoint(self, slot: int, pos: int) -> Checkpoint | None:
        """The slot's recurrent state as it is now, after its first `pos` tokens; None where memory ran short."""
        size = llama_cpp.llama_state_seq_get_size_ext(self.model.ctx, slot, PARTIAL_ONLY)
        try:
            data = (ctypes.c_uint8 * size)()
        except MemoryError:
            return None
        if not size or llama_cpp.llama_state_seq_get_data_ext(self.model.ctx, data, size, slot, PARTIAL_ONLY) != size:
            return None
        return Checkpoint(pos, data)

    def empty(self, slot: int) -> None:
        """Drop all of the slot's cells (any memory allows that)."""
        llama_cpp.llama_memory_seq_rm(self.model.memory, slot, -1, -1)
        self._positions.pop(slot, None)

    def forget(self, slot: int) -> None:
        """Drop the slot's cells and what the prefix cache knew of them: after a call, a cut or an undo that failed,
        nothing of them may be reused."""
        self.empty(slot)
        self.cache.forget(slot)

    def decoded(self) -> None:
        """A llama_decode ran: the copies asked for before it are done."""
        self._copying.clear()

    def copying(self, slot: int) -> bool:
        return slot in self._copying

    def save_dropped(self, slot: int, kept: int) -> None:
        """Save the cells a request taking `slot` drops (all past its first `kept`) to host memory, if worth it."""
        host, record = self.cache.host, self.cache.worth_saving(slot, kept)
        if host is None or record is None or slot in self._copying:  # (no host cache: nothing is worth saving)
            return
        if not self.cut(slot, len(record.tokens)):  # only what may be reused
            return
        data = self._stream(slot)
        if data is not None:
            host.add(SavedCells(record.tokens, record.exact, data, record.adapters, record.checkpoints))
            log.debug("cells_saved", slot=slot, cells=len(record.tokens), bytes=len(data))

    def snapshot(self, slot: int) -> SavedCells | None:
        """A free slot's reusable cells, to write to a file; None where its stream is in a copy or memory ran out.

        The stream's bytes are taken whole, the slot left as it is: cells past the reusable ones (an answer exact
        mode does not trust, which settling may still make reusable) ride along and are dropped when loaded."""
        if slot in self._copying:
            return None
        record = self.cache.reusable_record(slot)
        data = self._stream(slot)
        return None if data is None else SavedCells(record.tokens, record.exact, data, record.adapters,
                                                    record.checkpoints).leading_text()

    def snapshots(self, slots: list[int], known: Callable[[list[int], int], bool]) -> tuple[list[SavedCells],
                                                                                             list[list[int]]]:
        """The free slots' cells worth keeping on disk (as worth keeping in host memory: prefix_cache.worth_saving):
        those no file holds yet, and the tokens of those a file holds (`known`). Cells made under LoRA adapters
        are left out (Engine.persist)."""
        new, held = [], []
        for slot in slots:
            record = self.cache.worth_saving(slot, 0)
            if record is None:
                continue
            if record.adapters:  # a file holds base-model cells only: its fingerprint names no adapter set
                log.debug("kv_dir_cells_skipped", slot=slot, cells=len(record.tokens), adapters=str(record.adapters))
                continue
            tokens = record.tokens[:text_end(record.tokens)]  # what a file holds (SavedCells.leading_text)
            if not tokens:
                continue
            if known(tokens, min(record.exact, len(tokens))):
                held.append(tokens)
            elif (saved := self.snapshot(slot)) is not None:
                new.append(saved)
        return new, held

    def load(self, slot: int, saved: SavedCells) -> bool:
        """Put saved cells into a free slot, which then holds them for the prefix cache as if a request had left
        them there; False if llama.cpp refused them (the slot is then empty)."""
        if slot in self._copying:
            return False
        if not self._set(slot, saved):
            self.cache.forget(slot)
            return False
        self.place(slot, TOKENS)  # (a file's tokens are text)
        if not self.cut(slot, len(saved.tokens)):  # cells past the reusable ones
            self.forget(slot)
            return False
        self.cache.forget(slot)  # (checkpoints of what the slot held before are not of these cells)
        self.cache.release(slot, saved.tokens, saved.exact, saved.adapters)
        self.cache.share_checkpoints(self.cache.record_of(saved), slot, len(saved.tokens))
        return True

    def erase(self, slot: int) -> int:
        """Empty a free slot; the cells it held."""
        held = self.cache.tokens_held(slot)
        self.forget(slot)
        return held

    def restore(self, slot: int, saved: SavedCells, reuse: int) -> int:
        """Load saved cells into `slot`: the cells the slot then reuses, `reuse` (0 where it cannot). llama.cpp
        empties the slot before loading, and again if the load fails."""
        if slot not in self._copying and self._set(slot, saved):
            return reuse
        host = self.cache.host
        assert host is not None  # saved cells come from the host cache
        host.add(saved)  # still whole in host memory: another prompt may find it
        return 0

    # Loaded cells must sit at cell index = position, as a prefill puts them: the attention kernels sum cells in
    # index order (the tiled one by 64-cell tiles and 256-cell segments). llama_state_seq_set_data empties the slot
    # first, and a slot's stream holds only its own cells, laid from index 0 in position order, so they go from 0 on.
    def _set(self, slot: int, saved: SavedCells) -> bool:
        size = len(saved.data)  # (saved.size counts its checkpoints too)
        loaded = llama_cpp.llama_state_seq_set_data(self.model.ctx, saved.data, size, slot) == size
        if loaded:
            log.debug("cells_restored", slot=slot, cells=len(saved.tokens), bytes=size)
        return loaded

    def _stream(self, slot: int) -> ctypes.Array | None:
        """The slot's KV stream as llama_state_seq_get_data writes it; None where host memory ran short."""
        size = llama_cpp.llama_state_seq_get_size(self.model.ctx, slot)
        try:
            data = (ctypes.c_uint8 * size)()
        except MemoryError:  # the machine has less to spare than --cache-ram says: hold less from now on
            if self.cache.host is not None:
                self.cache.host.shrink()
                log.warning("cache_ram_reduced", limit_mib=self.cache.host.limit_bytes // MIB, bytes_not_saved=size)
            return None
        if size and llama_cpp.llama_state_seq_get_data(self.model.ctx, data, size, slot) == size:
            return data
        return None
