"""Passes of the row counts a draft makes, timed on purpose in a free slot (speculative/speculator.py weighs drafts by
what they cost on this machine): before serving, and again when the engine is idle. Engine thread only."""

from __future__ import annotations

import time
from dataclasses import dataclass

import llama_cpp

from worker.engine.kv.cell_transfer import CellTransfer
from worker.engine.native.model import LlamaModel


@dataclass(frozen=True)
class PassPlace:
    """Where a pass is timed on purpose: a slot, from this position on (past the cells it keeps)."""

    slot: int
    start: int


class DraftPasses:
    def __init__(self, model: LlamaModel, cells: CellTransfer, max_rows: int) -> None:
        self.model = model
        self.cells = cells
        self._batch = llama_cpp.llama_batch_init(max_rows, 0, 1)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self._batch)

    def time_pass(self, rows: int, place: PassPlace) -> float | None:
        """The faster of two passes of `rows` rows at `place`, whose cells are dropped after each (as a rejected
        draft's are: the slot's own cells stay as they were); None where llama_decode failed."""
        batch, fastest = self._batch, None
        for _ in range(2):
            for i in range(rows):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = i, place.start + i, 1
                batch.seq_id[i][0], batch.logits[i] = place.slot, True
            batch.n_tokens = rows
            started = time.perf_counter()
            failed = llama_cpp.llama_decode(self.model.ctx, batch) != 0
            seconds = time.perf_counter() - started
            if not self.cells.cut_at(place.slot, place.start):  # (pass_place picks a slot where cuts are bounded)
                self.cells.forget(place.slot)
                return None
            if failed:
                return None
            fastest = seconds if fastest is None else min(fastest, seconds)
        return fastest

    def place(self, free_slots: list[int], rows: int) -> PassPlace | None:
        """Where passes of up to `rows` rows can be timed between requests: past the cells of the free slot that
        holds the fewest (none is being copied; its cells are kept, and few cells to attend to keep the pass near
        its cost at load, timed in an empty slot). None: no free slot has room."""
        places = [PassPlace(slot, llama_cpp.llama_memory_seq_pos_max(self.model.memory, slot) + 1)
                  for slot in free_slots if not self.cells.copying(slot)]
        if not self.model.memory_kind.cuts_anywhere:  # a recurrent state cannot drop the pass's rows: empty slots only
            places = [place for place in places if place.start == 0]
        place = min(places, key=lambda place: place.start, default=None)
        return place if place is not None and place.start + rows <= self.model.n_ctx_seq else None
