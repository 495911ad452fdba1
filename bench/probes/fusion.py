"""Probe: can a step's decode rows and a prompt's prefill chunk share one llama_decode, and at what price to exactness?

The engine's step today (exact and fast alike): one llama_decode for the decode rows of every running sequence,
then one per prefill chunk. This probe runs the same step three ways, with 8 sequences decoding and a 9th prefilling
a 400-token prompt in CHUNK-token chunks, and reports per step the llama_decode calls and their time, and whether the
decoding sequences' logits stay bitwise those of the separate calls:
  separate   decode rows in one call, the chunk in another (one KV stream per sequence, as the engine runs)
  fused      decode rows and the chunk in one call, one KV stream per sequence: llama.cpp's split_equal takes the
             same number of tokens from each sequence per micro-batch, so it still computes them apart
  unified    one call and one KV stream for all (kv_unified): split_simple keeps them in one micro-batch, but a
             sequence's cells land wherever cells are free, so after an earlier request's cells were dropped its
             new cells sit before its old ones, and attention sums them in another order
Run: python bench/probes/fusion.py MODEL.gguf   ATTN=pinned|fast|off as in prefillspeed.py (default pinned);
     CHUNK=64 (prefill tokens beside the decode rows).
"""
from __future__ import annotations

import os
import sys
import time

import llama_cpp as L
import numpy as np

STREAMS, HISTORY, PROMPT, STEPS = 8, 200, 400, 6
CHUNK = int(os.environ.get("CHUNK", "64"))
F16, FA_ON, FA_OFF = L.GGML_TYPE_F16, L.LLAMA_FLASH_ATTN_TYPE_ENABLED, L.LLAMA_FLASH_ATTN_TYPE_DISABLED
ATTN = {"pinned": (FA_ON, 30), "fast": (FA_ON, F16), "off": (FA_OFF, F16)}  # (flash attention, V type; 30 is BF16)


@L.llama_log_callback
def _quiet(level, text, data):
    pass


def run(model, layout: str) -> tuple[list[np.ndarray], list[float], int]:
    """STEPS steps; returns the decode rows' logits per step, each step's seconds, and llama_decode calls a step."""
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 1024 * (STREAMS + 1), 512, 512, STREAMS + 1
    params.n_threads = params.n_threads_batch = 2
    params.kv_unified = layout == "unified"
    params.flash_attn_type, params.type_v = ATTN[os.environ.get("ATTN", "pinned")]
    ctx = L.llama_init_from_model(model, params)
    batch = L.llama_batch_init(512, 0, 1)

    def decode(rows):
        batch.n_tokens = len(rows)
        for i, (token, pos, seq, want) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, want
        assert L.llama_decode(ctx, batch) == 0
        return [np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                for i, row in enumerate(rows) if row[3]]

    # A finished request's cells, dropped after the others arrived: in one unified stream that leaves free cells
    # below theirs, which their next tokens then take, out of position order (each stream of its own has none).
    for start in range(0, 256, 64):
        decode([(400 + p % 300, p, STREAMS, False) for p in range(start, start + 64)])
    for seq in range(STREAMS):  # each stream's history, prefilled alone
        for start in range(0, HISTORY, 64):
            decode([(100 + seq * 7 + p % 500, p, seq, False) for p in range(start, min(HISTORY, start + 64))])
    L.llama_memory_seq_rm(L.llama_get_memory(ctx), STREAMS, -1, -1)
    logits, times, calls = [], [], 0
    for step in range(STEPS):
        rows = [(200 + step + seq, HISTORY + step, seq, True) for seq in range(STREAMS)]
        chunk = [(300 + p % 700, p, STREAMS, False) for p in range(step * CHUNK, (step + 1) * CHUNK)]
        started = time.perf_counter()
        if layout == "separate":
            out = decode(rows)
            decode(chunk)
            calls = 2
        else:
            out = decode(rows + chunk)
            calls = 1
        times.append(time.perf_counter() - started)
        logits.append(np.stack(out))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return logits, times, calls


def main(path: str) -> None:
    global n_vocab
    L.llama_log_set(_quiet, None)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    reference, _, _ = run(model, "separate")
    print(f"== {os.path.basename(path)} attention {os.environ.get('ATTN', 'pinned')}: {STREAMS} streams decoding, "
          f"a {CHUNK}-token chunk beside them each step")
    for layout in ("separate", "fused", "unified"):
        logits, times, calls = run(model, layout)
        worst = max(float(np.abs(a - b).max()) for a, b in zip(logits, reference))
        print(f"{layout:9s} llama_decode calls a step {calls}, step ms median {1000 * np.median(times[1:]):6.1f}, "
              f"decode rows vs separate: {worst:.2e}")


if __name__ == "__main__":
    for model_path in sys.argv[1:]:
        main(model_path)
