"""Probe: what a whole-stream seq_cp costs against prefilling the tokens it saves (prefix_cache.COPY_MIN_GAIN).

llama.cpp copies another slot's KV stream only whole, at the next llama_decode. Here slot 0 holds 512 prefilled
cells; each round times 16 rows at position 512 decoded in slot 0 itself, the same 16 rows in slot 1 right after
copying slot 0's stream into it, and a 64-token prefill (per token). Medians of 6 rounds.
Run: .venv/bin/python bench/probes/copycost.py [CTX_SIZE]   (4 slots; default 8192)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from worker.engine.host import EngineConfig
from worker.engine.native.model import LlamaModel

HELD = 512  # cells slot 0 holds
ROWS = 16


def main() -> None:
    ctx_size = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    model = LlamaModel(find_model(None), EngineConfig(parallel=4, ctx_size=ctx_size))
    batch = llama_cpp.llama_batch_init(512, 0, 1)

    def decode(slot: int, start: int, n: int) -> float:
        for i in range(n):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = 100 + (start + i) % 1000, start + i, 1
            batch.seq_id[i][0], batch.logits[i] = slot, i == n - 1
        batch.n_tokens = n
        started = time.perf_counter()
        assert llama_cpp.llama_decode(model.ctx, batch) == 0
        return time.perf_counter() - started

    for start in range(0, HELD, 256):
        decode(0, start, 256)
    in_place, copied, prefill = [], [], []
    for _ in range(6):
        in_place.append(decode(0, HELD, ROWS))
        llama_cpp.llama_memory_seq_rm(model.memory, 0, HELD, -1)
        llama_cpp.llama_memory_seq_cp(model.memory, 0, 1, -1, -1)
        llama_cpp.llama_memory_seq_rm(model.memory, 1, HELD, -1)
        copied.append(decode(1, HELD, ROWS))
        llama_cpp.llama_memory_seq_rm(model.memory, 2, -1, -1)
        prefill.append(decode(2, 0, 64) / 64)
    ms = {name: statistics.median(values) * 1e3 for name, values in
          (("in place", in_place), ("copied", copied), ("prefill", prefill))}
    print(f"{ctx_size // 4} cells a slot: {ROWS} rows after {HELD} cells in place {ms['in place']:.1f} ms, "
          f"after a stream copy {ms['copied']:.1f} ms (copy ~{ms['copied'] - ms['in place']:.1f} ms); "
          f"prefill {ms['prefill']:.2f} ms a token")
    llama_cpp.llama_batch_free(batch)
    model.close()


if __name__ == "__main__":
    main()
