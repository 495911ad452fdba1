"""Probe: does a row's logits depend on anything but its own tokens? Per weight type, per set of kernels.

One prompt of ~690 tokens (past the 512 cells where llama.cpp's flash attention splits a lone row's KV over the
threads), four KV streams (kv_unified off, as the worker runs), 2 threads (--threads N: N). Each case prints the
largest |logit difference| against the same tokens prefilled whole in one llama_decode; 0 is bitwise equal:
  cut N        the prompt prefilled in chunks of N rows (1: one token at a time), its last logits;
  decoded      24 greedy tokens decoded one at a time after the prompt, the last one's logits;
  next turn    then a 16-token turn prefilled on the decode-made cells, its last logits;
  beside ...   the prompt's next row decoded beside other streams' rows in the same llama_decode: 1 and 3 decode
               rows, a 16-row and a 100-row prefill chunk; and a 48-row chunk of it beside 1 decode row;
  restored     the answered stream saved (llama_state_seq_get_data) and loaded into an empty stream
               (llama_state_seq_set_data), the turn prefilled there;
  copied       the answered stream copied into another (llama_memory_seq_cp), the turn prefilled there;
  2 threads    (at --threads other than 2) the prompt prefilled whole at N threads against at 2.

Kernels compared (each type, each set, in a fresh process, as llama-cpp-python binds one libllama per process):
  own          llama.cpp's own picks: llama-cpp-python's library, K/V f16, flash attention on (what fast mode runs)
  pinned       exact mode without the patched build (its fallback, and what it ran before the patches but for F16,
               then on a build without llamafile): K q8_0 / V f16 (the per-row kernel), GGML_CPU_TILED_MM=0, Q4_K
               unrepacked, llama-cpp-python's own library
  patched      the library built with patches/llama.cpp, GGML_CPU_BATCH_INVARIANT=1, K/V f16, flash attention on

Run: python bench/probes/batchinvariance.py [--kernels own,pinned,patched] [--types q4_0,...] [--patched DIR]
                                            [--repeat N] [--threads N]
     DIR (default: $PATCHED_LIB) holds the patched libllama.so (scripts/install-batch-invariant puts it in
     .venv/lib/llm-worker/batch-invariant). N filler sentences make the prompt (42: 690 tokens; 35: 575, still past
     512 cells). Quantized copies of the test model are cached in ~/.cache/llm-worker/probe-models.
"""
from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

TYPES = ("q4_0", "q4_1", "q5_0", "q8_0", "q4_k_m", "q6_k", "f16")
CUTS = (1, 16, 48, 64, 100, 256, 512)
REPEAT = 42  # filler sentences: a 690-token prompt
ANSWER, TURN = 24, 16
OTHER_CELLS = 64  # what the other streams hold before their rows go beside stream 0's
CHUNK_BESIDE = 48  # stream 0's prefill chunk that goes beside a decode row
MODELS = Path.home() / ".cache" / "llm-worker" / "probe-models"


def kernel_env(kernels: str, qtype: str, patched: str) -> dict[str, str]:
    """The environment a child runs under for one set of kernels and one weight type."""
    if kernels == "own":
        return {"CACHE_K": "f16", "CACHE_V": "f16", "REPACK": "1"}
    # Q4_K's repacked GEMM and GEMV sum apart (exactness/ggml_switches.py): exact mode loads such a file unrepacked
    repack = "0" if qtype == "q4_k_m" else "1"
    if kernels == "pinned":
        return {"CACHE_K": "q8_0", "CACHE_V": "f16", "GGML_CPU_TILED_MM": "0", "REPACK": repack}
    return {"CACHE_K": "f16", "CACHE_V": "f16", "REPACK": repack, "GGML_CPU_BATCH_INVARIANT": "1",
            "LLAMA_CPP_LIB_PATH": patched}


def quantized(qtype: str) -> Path:
    """The test model quantized again to qtype by llama.cpp's quantizer (a child process: it binds libllama)."""
    out = MODELS / f"smollm2-{qtype}.gguf"
    if not out.exists():
        MODELS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, __file__, "--quantize", qtype, str(out)], check=True,
                       stderr=subprocess.DEVNULL)
    return out


def quantize(qtype: str, out: Path) -> None:
    import llama_cpp as L

    from worker.source import load_registry, resolve_model

    params = L.llama_model_quantize_default_params()
    params.ftype = getattr(L, f"LLAMA_FTYPE_MOSTLY_{qtype.upper()}")
    params.allow_requantize = True
    part = out.with_suffix(".part")
    source = resolve_model(None, load_registry()).path
    assert L.llama_model_quantize(str(source).encode(), str(part).encode(), params) == 0
    part.rename(out)


@functools.cache
def _quiet():
    """llama.cpp's log callback that drops its load and context lines (kept alive as long as the process)."""
    import llama_cpp as L

    return L.llama_log_callback(lambda level, text, data: None)


def load_model(path: Path):
    """The model under this process's environment (REPACK=0: weights as stored), llama.cpp's log silenced."""
    import llama_cpp as L

    L.llama_log_set(_quiet(), None)
    L.llama_backend_init()
    params = L.llama_model_default_params()
    params.use_extra_bufts = os.environ["REPACK"] == "1"
    return L.llama_model_load_from_file(str(path).encode(), params)


def measure(path: Path, repeat: int = REPEAT, threads: int = 2) -> dict[str, float]:
    """Every case on one model under this process's environment: {case: max |logit difference|}."""
    import llama_cpp as L
    import numpy as np

    cell_types = {"f16": L.GGML_TYPE_F16, "q8_0": L.GGML_TYPE_Q8_0}
    model = load_model(path)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    def tok(text: str, bos: bool = True) -> list[int]:
        buf = (L.llama_token * 4096)()
        return list(buf[:L.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, 4096, bos, True)])

    prompt = tok("The history of bridges begins with logs laid across streams and stones set in rivers. " * repeat
                 + "Explain why arches carry load so well.")
    other = tok("Bees communicate through dances that encode direction and distance to flowers. " * repeat
                + "How do bees find their way home?")
    turn = tok(" Thanks. And what about suspension bridges, then? Say it briefly please.", bos=False)[:TURN]
    n = len(prompt)
    batch = L.llama_batch_init(1024, 0, 1)

    def context(n_threads: int = threads):
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 4 * 1024, 1024, 1024, 4
        cp.n_threads = cp.n_threads_batch = n_threads
        cp.kv_unified = False
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cp.type_k, cp.type_v = cell_types[os.environ["CACHE_K"]], cell_types[os.environ["CACHE_V"]]
        return L.llama_init_from_model(model, cp)

    def decode(ctx, items):
        """items: (token, pos, seq, wants logits); {seq: its last wanted row's logits}."""
        batch.n_tokens = len(items)
        for i, (t, p, s, w) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
            batch.seq_id[i][0], batch.logits[i] = s, w
        assert L.llama_decode(ctx, batch) == 0
        return {s: np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                for i, (_, _, s, w) in enumerate(items) if w}

    def prefill(ctx, tokens, start, end, chunk, seq=0):
        logits = None
        for at in range(start, end, chunk):
            stop = min(end, at + chunk)
            logits = decode(ctx, [(tokens[p], p, seq, p == stop - 1) for p in range(at, stop)])[seq]
        return logits

    def cold(tokens, n_threads: int = threads):
        ctx = context(n_threads)
        try:
            return prefill(ctx, tokens, 0, len(tokens), len(tokens))
        finally:
            L.llama_free(ctx)

    def gap(a, b) -> float:
        return float(np.abs(a - b).max())

    results = {}
    whole = cold(prompt)
    if threads != 2:
        results["2 threads"] = gap(whole, cold(prompt, 2))
    for cut in CUTS:
        ctx = context()
        results[f"cut {cut}"] = gap(prefill(ctx, prompt, 0, n, cut), whole)
        L.llama_free(ctx)

    ctx = context()
    memory = L.llama_get_memory(ctx)
    logits = prefill(ctx, prompt, 0, n, n)
    answer = []
    for pos in range(n, n + ANSWER):
        answer.append(int(np.argmax(logits)))
        logits = decode(ctx, [(answer[-1], pos, 0, True)])[0]
    full = prompt + answer + turn
    results["decoded"] = gap(logits, cold(prompt + answer))
    turned = cold(full)
    results["next turn"] = gap(prefill(ctx, full, n + ANSWER, len(full), TURN), turned)
    L.llama_memory_seq_rm(memory, 0, n + ANSWER, -1)

    size = L.llama_state_seq_get_size(ctx, 0)
    saved = (ctypes.c_uint8 * size)()
    assert L.llama_state_seq_get_data(ctx, saved, size, 0) == size
    assert L.llama_state_seq_set_data(ctx, saved, size, 2) == size
    results["restored"] = gap(prefill(ctx, full, n + ANSWER, len(full), TURN, seq=2), turned)
    L.llama_memory_seq_cp(memory, 0, 3, -1, -1)
    results["copied"] = gap(prefill(ctx, full, n + ANSWER, len(full), TURN, seq=3), turned)
    L.llama_free(ctx)

    # The beside cases share one context (a fresh one and a prefill each took a fifth of the probe): stream 0 holds
    # the prompt but its last CHUNK_BESIDE rows, streams 1-3 the other prompt's first OTHER_CELLS tokens. Each case
    # makes stream 0's rows alone, drops them (llama_memory_seq_rm, which puts the cells' head back), makes them
    # again beside the other streams' rows, and drops everything it added: each compares two decodes over the same
    # cells, as a case on a context of its own did.
    ctx = context()
    memory = L.llama_get_memory(ctx)
    first = n - CHUNK_BESIDE
    prefill(ctx, prompt, 0, first, first)
    for seq in (1, 2, 3):
        prefill(ctx, other, 0, OTHER_CELLS, OTHER_CELLS, seq=seq)

    def beside(rows_of_zero: int, others: list[tuple[int, int]]) -> float:
        """Stream 0's rows [n - rows_of_zero, n) alone, then beside (stream, rows) of the other prompt."""
        start = n - rows_of_zero
        prefill(ctx, prompt, first, start, CHUNK_BESIDE)  # the cells before the case's rows (none for the chunk)
        alone = prefill(ctx, prompt, start, n, rows_of_zero)
        L.llama_memory_seq_rm(memory, 0, start, -1)
        items = [(prompt[p], p, 0, p == n - 1) for p in range(start, n)]
        for seq, rows in others:
            items += [(other[p], p, seq, False) for p in range(OTHER_CELLS, OTHER_CELLS + rows)]
        together = decode(ctx, items)[0]
        for seq in range(4):
            L.llama_memory_seq_rm(memory, seq, first if seq == 0 else OTHER_CELLS, -1)
        return gap(together, alone)

    results["beside 1 decode row"] = beside(1, [(1, 1)])
    results["beside 3 decode rows"] = beside(1, [(1, 1), (2, 1), (3, 1)])
    results["beside a 16-row chunk"] = beside(1, [(1, 16)])
    results["beside a 100-row chunk"] = beside(1, [(1, 100)])
    results[f"{CHUNK_BESIDE}-row chunk beside 1 row"] = beside(CHUNK_BESIDE, [(1, 1)])
    L.llama_free(ctx)
    L.llama_batch_free(batch)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", default="own,pinned,patched")
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--patched", default=os.environ.get("PATCHED_LIB", ""))
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--quantize", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quantize:
        return quantize(args.quantize[0], Path(args.quantize[1]))
    if args.child:
        print(json.dumps(measure(args.child, args.repeat, args.threads)))
        return
    types = args.types.split(",")
    for kernels in args.kernels.split(","):
        assert kernels != "patched" or args.patched, "--patched DIR (or PATCHED_LIB) names the patched build"
        table = {}
        for qtype in types:
            env = {**os.environ, **kernel_env(kernels, qtype, args.patched)}
            child = [sys.executable, __file__, f"--repeat={args.repeat}", f"--threads={args.threads}", "--child",
                     str(quantized(qtype))]
            out = subprocess.run(child, env=env, check=True, capture_output=True, text=True).stdout
            table[qtype] = json.loads(out.strip().splitlines()[-1])
        cases = list(next(iter(table.values())))
        print(f"\n{kernels}: max |logit difference| against the same tokens prefilled whole (0: bitwise equal)\n")
        print("| case | " + " | ".join(types) + " |")
        print("|---|" + "---|" * len(types))
        for case in cases:
            print(f"| {case} | " + " | ".join(_cell(table[t][case]) for t in types) + " |")
        sys.stdout.flush()


def _cell(value: float) -> str:
    return "0" if value == 0 else f"{value:.2g}"


if __name__ == "__main__":
    main()
