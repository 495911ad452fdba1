"""Probe: what verifying drafts costs, and whether a verify row computes what a one-token decode does.

Speculative decoding appends a sequence's k drafted tokens to its decode row; llama.cpp then computes k+1 rows of
that sequence in the step's llama_decode. With one KV stream per slot llama.cpp splits a batch with split_equal:
one micro-batch takes the same number of rows from each sequence, and only from slots numbered one after another,
so uneven drafts, or decode rows from slots with gaps between them, cost a micro-batch (a pass over the weights)
each. Every slot here holds CONTEXT prefilled cells; medians of ROUNDS.
Run: .venv/bin/python bench/probes/verifycost.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from bench.probes.rows import RowDecoder
from worker.engine.host import EngineConfig
from worker.engine.native.model import LlamaModel

CONTEXT = 320
ROUNDS = 7
SLOTS = 4


def main() -> None:
    model = LlamaModel(find_model(None), EngineConfig(parallel=SLOTS, ctx_size=SLOTS * 1024))
    rows_of = RowDecoder(model)
    logits = rows_of.logits

    def decode(rows: list[tuple[int, int]]) -> float:
        """(slot, position) rows, every row with logits; seconds."""
        return rows_of.decode([(slot, pos, True) for slot, pos in rows])

    def rewind() -> None:
        rows_of.rewind(range(SLOTS), CONTEXT)

    rows_of.fill(range(SLOTS), CONTEXT)

    def timed(layout: dict[int, int]) -> float:
        """{slot: rows} from CONTEXT on; median ms."""
        return rows_of.median_ms(lambda: decode([(slot, CONTEXT + i) for slot, n in layout.items() for i in range(n)]),
                                 range(SLOTS), CONTEXT, ROUNDS)

    one = timed({0: 1})
    print("one sequence, rows in one call (ms; x one row):")
    for rows in (1, 2, 3, 4, 6, 8, 12, 16):
        ms = timed({0: rows})
        print(f"  {rows:2d} rows {ms:6.1f} ms  {ms / one:4.2f}x")
    print("several sequences (ms):")
    layouts = {"slots 0,1: 1+1": {0: 1, 1: 1}, "slots 0,2: 1+1": {0: 1, 2: 1},
               "slots 0-3: 1 each": {0: 1, 1: 1, 2: 1, 3: 1}, "slots 0-3: 5+1+1+1": {0: 5, 1: 1, 2: 1, 3: 1},
               "slots 0-3: 5 each": {0: 5, 1: 5, 2: 5, 3: 5}, "slots 0,1: 5+1": {0: 5, 1: 1},
               "slots 0,1: 5+5": {0: 5, 1: 5}}
    for name, layout in layouts.items():
        print(f"  {name:22s} {timed(layout):6.1f} ms")

    # Exactness: k+1 rows of slot 0 in one call against the same tokens decoded one at a time.
    for rows in (2, 5, 9, 17):
        alone = []
        for i in range(rows):
            decode([(0, CONTEXT + i)])
            alone.append(logits(0))
        rewind()
        decode([(0, CONTEXT + i) for i in range(rows)] + [(1, CONTEXT), (2, CONTEXT)])
        together = [logits(i) for i in range(rows)]
        rewind()
        same = sum(a == b for a, b in zip(alone, together))
        print(f"{rows} rows in one call beside 2 decode rows: {same}/{rows} rows bitwise equal to one-token decodes")
    rows_of.close()
    model.close()


if __name__ == "__main__":
    main()
