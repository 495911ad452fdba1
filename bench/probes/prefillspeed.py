"""Probe: prefill and decode tok/s of one sequence, to compare llama.cpp builds (e.g. with and without llamafile).

Prefills PROMPT tokens (1,536 unless set; a multiple of 256) in 256-token chunks into a 4-slot context (8,192
tokens, more if the prompt needs it), then decodes DECODE tokens (64 unless set) one at a time; ROUNDS rounds (3
unless set). ATTN picks the attention: pinned (flash attention on, K cells q8_0, V f16: every row through its
per-row kernel, as exact mode runs on the cpu backend; the default), fast (flash attention on, f16 cells: the
kernels llama.cpp picks by shape, as fast mode runs), off (no flash attention, f16 cells). REPACK=0 loads the
weights unrepacked; ATTN=fa:K:V names any cell types (fa:f32:f16, nofa:f16:f16); GGML_CPU_TILED_MM=0 or
GGML_CPU_TILED_MM_FORCE=1 hold K-quant products to one kernel. Point llama-cpp-python at another build's libraries
with LLAMA_CPP_LIB_PATH, and alternate the runs (this machine's speed drifts):
  python bench/probes/prefillspeed.py MODEL.gguf [more.gguf ...]
  LLAMA_CPP_LIB_PATH=$(CMAKE_ARGS=-DGGML_LLAMAFILE=OFF scripts/build-llama-cpp cpu-native llama | tail -1) \
      python bench/probes/prefillspeed.py MODEL.gguf
"""
from __future__ import annotations

import os
import sys
import time

import llama_cpp as L

# PROMPT, ROUNDS and DECODE from the environment (bench/run.py weights --prompt-tokens, --rounds)
PROMPT, ROUNDS = int(os.environ.get("PROMPT", 1536)), int(os.environ.get("ROUNDS", 3))
DECODE = int(os.environ.get("DECODE", 64))
CHUNK, SEQS = 256, 4
# each of the 4 sequences holds the prompt and its decoded tokens, in whole chunks
N_CTX = max(8192, SEQS * CHUNK * -(-(PROMPT + DECODE) // CHUNK))
F16, FA_ON, FA_OFF = L.GGML_TYPE_F16, L.LLAMA_FLASH_ATTN_TYPE_ENABLED, L.LLAMA_FLASH_ATTN_TYPE_DISABLED
# name: (flash attention, K type, V type); ggml numbers BF16 30, which the binding does not name
ATTN = {"pinned": (FA_ON, L.GGML_TYPE_Q8_0, F16), "fast": (FA_ON, F16, F16), "off": (FA_OFF, F16, F16)}


def _cells(name: str) -> tuple[int, int, int]:
    """ATTN=fa:K:V (flash attention on) or nofa:K:V with ggml type names, e.g. fa:f32:f16."""
    flash, k, v = name.split(":")
    types = {"f32": L.GGML_TYPE_F32, "f16": F16, "bf16": 30, "q8_0": L.GGML_TYPE_Q8_0}
    return (FA_ON if flash == "fa" else FA_OFF), types[k], types[v]


@L.llama_log_callback
def _quiet(level, text, data):
    pass


def main(path: str) -> None:
    L.llama_log_set(_quiet, None)
    L.llama_backend_init()
    model_params = L.llama_model_default_params()
    model_params.use_extra_bufts = os.environ.get("REPACK", "1") == "1"
    model = L.llama_model_load_from_file(path.encode(), model_params)
    params = L.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = N_CTX, CHUNK, CHUNK, SEQS
    params.kv_unified, params.n_threads, params.n_threads_batch = False, 2, 2
    attn = os.environ.get("ATTN", "pinned")
    params.flash_attn_type, params.type_k, params.type_v = ATTN.get(attn) or _cells(attn)
    ctx = L.llama_init_from_model(model, params)
    batch = L.llama_batch_init(CHUNK, 0, 1)

    def decode(tokens: list[int], first: int) -> None:
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, first + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == len(tokens) - 1
        assert L.llama_decode(ctx, batch) == 0

    rounds = []
    for _ in range(ROUNDS):
        L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, -1, -1)
        started = time.perf_counter()
        for first in range(0, PROMPT, CHUNK):
            decode([100 + (first + i) % 1000 for i in range(CHUNK)], first)
        prefilled = time.perf_counter()
        for i in range(DECODE):
            decode([200 + i], PROMPT + i)
        rounds.append(f"prefill {PROMPT / (prefilled - started):.0f} "
                      f"decode {DECODE / (time.perf_counter() - prefilled):.0f}")
    build = "llamafile" if b"LLAMAFILE = 1" in L.llama_print_system_info() else "no llamafile"
    kernels = " ".join(f"{k}={os.environ[k]}" for k in ("REPACK", "GGML_CPU_TILED_MM", "GGML_CPU_TILED_MM_FORCE")
                       if k in os.environ)
    print(f"{os.path.basename(path)} ({build}, attention {attn} {kernels}) tok/s: " + " | ".join(rounds))


if __name__ == "__main__":
    for model_path in sys.argv[1:]:
        main(model_path)
