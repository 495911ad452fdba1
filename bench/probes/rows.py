"""Rows of a llama_decode call for the probes that run the worker's own LlamaModel (its kernels, its KV layout).

A row is (slot, position, logits wanted); each slot is one sequence with its own KV stream, as the engine runs.
The token at a position is a fixed function of it, so a row's inputs never depend on what ran before.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable, Iterable

import llama_cpp

from worker.engine.native.model import LlamaModel

Row = tuple[int, int, bool]  # (slot, position, logits)


class RowDecoder:
    def __init__(self, model: LlamaModel, max_rows: int = 512) -> None:
        self.model = model
        self._batch = llama_cpp.llama_batch_init(max_rows, 0, 1)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self._batch)

    def decode(self, rows: list[Row]) -> float:
        """One llama_decode over `rows`; its seconds."""
        batch = self._batch
        for i, (slot, pos, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = 100 + (pos * 7) % 1000, pos, 1
            batch.seq_id[i][0], batch.logits[i] = slot, logits
        batch.n_tokens = len(rows)
        started = time.perf_counter()
        assert llama_cpp.llama_decode(self.model.ctx, batch) == 0
        return time.perf_counter() - started

    def logits(self, row: int) -> bytes:
        """Row `row`'s logits of the last call, as bytes to compare bitwise."""
        return ctypes.string_at(llama_cpp.llama_get_logits_ith(self.model.ctx, row), self.model.n_vocab * 4)

    def rewind(self, slots: Iterable[int], keep: int) -> None:
        """Drop the slots' cells from position `keep` on."""
        for slot in slots:
            llama_cpp.llama_memory_seq_rm(self.model.memory, slot, keep, -1)

    def fill(self, slots: Iterable[int], cells: int, chunk: int = 64) -> None:
        """Prefill each slot's first `cells` positions."""
        for slot in slots:
            for start in range(0, cells, chunk):
                self.decode([(slot, pos, False) for pos in range(start, min(cells, start + chunk))])

    def median_ms(self, step: Callable[[], float], slots: Iterable[int], keep: int, rounds: int) -> float:
        """Median of `rounds` runs of `step` (its seconds), the slots rewound to `keep` cells after each."""
        samples = []
        for _ in range(rounds):
            samples.append(step())
            self.rewind(slots, keep)
        return statistics.median(samples) * 1e3
