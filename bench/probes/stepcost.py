"""Probe: what a step's llama_decode calls cost, per row, in exact mode's kernels or fast mode's, and what fusing
a step's calls into one would save.

1. A prompt's prefill cut into CHUNK-row calls (one sequence), ms a row, for chunk sizes from 16 to 384 rows: what
   the prefill budget beside running streams (scheduler.py) costs against whole-prompt chunks.
2. Decode rows of k sequences in one call (slots 0..k-1, one KV stream each), ms a row.
3. A step with decode rows in slots 0, 1 and 3 while slot 2 prefills 26 tokens: llama.cpp's split_equal takes
   rows only from slots numbered one after another, so the decode rows alone are two passes over the weights;
   in one call with the chunk (rows ordered by slot) the first pass takes a row of every slot and the chunk's
   rest is the second. Timed both ways, and the logits compared bitwise.
Every slot holds CONTEXT prefilled cells first; medians of ROUNDS. Kernels are chosen as the worker chooses them
for MODE (exact: flash attention pinned to its per-row kernel, the weight type's ggml settings; fast: llama.cpp's
own picks); run once per MODE, each in its own process (ggml reads its settings once).
Run: MODE=exact|fast .venv/bin/python bench/probes/stepcost.py [MODEL.gguf]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from bench.probes.rows import RowDecoder
from worker.engine.host import EngineConfig
from worker.engine.modes import CacheMode
from worker.engine.native.model import LlamaModel

SLOTS, CONTEXT, PROMPT, ROUNDS = 8, 300, 384, 5
CHUNKS = (16, 32, 48, 64, 128, 256, 384)


def main() -> None:
    mode = os.environ.get("MODE", "exact")
    path = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    model = LlamaModel(path, EngineConfig(parallel=SLOTS, ctx_size=SLOTS * 1024, prefix_cache=CacheMode(mode)))
    rows = RowDecoder(model)
    decode, logits = rows.decode, rows.logits
    print(f"{path.name}, {mode} kernels: {model.attention}, {model.kernels}")
    rows.fill(range(SLOTS - 1), CONTEXT)

    print(f"1. a {PROMPT}-token prompt prefilled in chunks (slot {SLOTS - 1}), ms a row")
    last = SLOTS - 1
    for chunk in CHUNKS:
        ms = rows.median_ms(lambda: sum(decode([(last, pos, pos == PROMPT - 1)
                                                for pos in range(start, min(PROMPT, start + chunk))])
                                        for start in range(0, PROMPT, chunk)), [last], 0, ROUNDS)
        print(f"   {chunk:3d}-row chunks  {ms / PROMPT:5.2f}")

    print(f"2. decode rows of k sequences in one call ({CONTEXT} cells each): ms, ms a row")
    for k in range(1, SLOTS):
        ms = rows.median_ms(lambda: decode([(slot, CONTEXT, True) for slot in range(k)]), range(k), CONTEXT, ROUNDS)
        print(f"   {k} rows  {ms:5.1f}  {ms / k:5.2f}")

    decoding = [(0, CONTEXT, True), (1, CONTEXT, True), (3, CONTEXT, True)]
    chunk = [(2, CONTEXT + i, i == 25) for i in range(26)]
    fused = decoding[:2] + chunk + decoding[2:]
    separate_ms = rows.median_ms(lambda: decode(decoding) + decode(chunk), range(4), CONTEXT, ROUNDS)
    fused_ms = rows.median_ms(lambda: decode(fused), range(4), CONTEXT, ROUNDS)
    decode(decoding)
    alone = [logits(row) for row in range(3)]
    decode(chunk)
    alone.append(logits(25))
    rows.rewind(range(4), CONTEXT)
    decode(fused)
    together = [logits(0), logits(1), logits(28), logits(27)]
    equal = sum(a == b for a, b in zip(alone, together))
    print(f"3. decode rows in slots 0,1,3 and 26 prefill rows of slot 2: two calls {separate_ms:.1f} ms, "
          f"one call {fused_ms:.1f} ms; logits bitwise equal {equal}/4")
    rows.close()
    model.close()


if __name__ == "__main__":
    main()
