"""Probe: which batch layouts leave a sequence's numerics bitwise equal to a cold, aligned, solo prefill?

Extends ../shared/probes/kvexact.py and kvmix.py to the questions the prefix cache rests on:
  1. chunk boundaries: aligned starts with any length vs any split;
  2. partial last chunk: is a cell made by a short chunk [64k, e) equal to one made by [64k, 64k+64)?
  3. other sequences in the same llama_decode: prefill chunks of two sequences, decode rows of several;
  4. generated KV: single-token decode vs aligned prefill of the same tokens;
  5. cell reuse: KV copied between streams (seq_cp whole stream + seq_rm tail) vs cold.
Each line prints the largest |logit difference| of the compared case against the reference (0 = bitwise).
Run: python bench/probes/kvrule.py MODEL.gguf [more.gguf ...]   (any python with llama-cpp-python)
     FLASH_ATTN=0|1, REPACK=0|1 (weights as stored | repacked); LLAMA_CPP_LIB_PATH=<a build's bin> for another
     llama.cpp build, e.g. scripts/build-llama-cpp cpu-native,no-llamafile llama (bench/probes/RESULTS.md);
     CACHE_K, CACHE_V=f16|bf16|f32|q8_0 (the KV cell types); REPEAT=N (the prompts' filler sentences, 20 by
     default: 332 tokens; 40 takes the cache past the 512 cells where flash attention splits a lone row's KV);
     GGML_CPU_TILED_MM=0 (K-quant weights through vec_dot whatever the rows) is read by ggml itself;
     N_GPU_LAYERS=99 offloads every layer to the build's GPU device (LLAMA_CPP_LIB_PATH=<a vulkan or cuda build>);
     BESIDE=1,3,7,15 (how many other sequences decode beside the probed one in 3.; default 1,3: a GPU library
     changes kernels past 8 rows).
"""
from __future__ import annotations

import os
import sys

import llama_cpp as L
import numpy as np

A = 64
# Flash attention on llama.cpp's CPU picks its kernel by shape (tiled for >= 64 query rows, split-KV for one
# row of one stream over >= 512 cells), so it is probed both ways: FLASH_ATTN=0 python kvrule.py ...
# Repacked quantized weights (Q4_0, Q4_K, IQ4_NL on x86) run one row through a GEMV and groups of rows through a
# GEMM whose sums differ: REPACK=0 loads the weights as stored.
REPACK = os.environ.get("REPACK", "1") == "1"
FLASH_ATTN = {"0": L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
              "1": L.LLAMA_FLASH_ATTN_TYPE_ENABLED}[os.environ.get("FLASH_ATTN", "1")]
# Flash attention's tiled and split-KV kernels both require K and V cells of one type: with V in another type than
# K every row takes the per-row kernel, whatever the batch (bench/probes/RESULTS.md, "flash attention pinned").
# (ggml.h numbers BF16 30; the binding names no constant for it)
CELL_TYPES = {"f16": L.GGML_TYPE_F16, "bf16": 30, "f32": L.GGML_TYPE_F32, "q8_0": L.GGML_TYPE_Q8_0}
CACHE_K, CACHE_V = os.environ.get("CACHE_K", "f16"), os.environ.get("CACHE_V", "f16")
REPEAT = int(os.environ.get("REPEAT", "20"))
N_GPU_LAYERS = int(os.environ.get("N_GPU_LAYERS", "0"))
BESIDE = [int(n) for n in os.environ.get("BESIDE", "1,3").split(",")]


@L.llama_log_callback
def _quiet(level, text, data):  # llama.cpp's load and context logs would bury the results
    pass


def main(path: str) -> None:
    L.llama_log_set(_quiet, None)
    L.llama_backend_init()
    params = L.llama_model_default_params()
    params.use_extra_bufts = REPACK  # False: no repacked weights (llama.cpp's --no-repack)
    params.n_gpu_layers = N_GPU_LAYERS
    model = L.llama_model_load_from_file(path.encode(), params)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    def tok(text: str) -> list[int]:
        buf = (L.llama_token * 8192)()
        n = L.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, 8192, True, True)
        return list(buf[:n])

    P = tok("The history of bridges begins with logs laid across streams and stones set in rivers. " * REPEAT
            + "Explain why arches carry load so well, in three sentences.")
    Q = tok("Bees communicate through dances that encode direction and distance to flowers. " * REPEAT
            + "How do bees find their way home?")
    n = len(P)

    def ctx_new(seqs: int = max(4, max(BESIDE) + 1)):
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 2048 * seqs, 1024, 512, seqs
        cp.n_threads = cp.n_threads_batch = 2
        cp.kv_unified = False
        cp.flash_attn_type = FLASH_ATTN
        cp.type_k, cp.type_v = CELL_TYPES[CACHE_K], CELL_TYPES[CACHE_V]
        return L.llama_init_from_model(model, cp)

    batch = L.llama_batch_init(1024, 0, 1)

    def decode(ctx, items):
        """items: (token, pos, seq, logits). Returns {seq: logits of its last wanted row}."""
        batch.n_tokens = len(items)
        for i, (t, p, s, w) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, p, 1
            batch.seq_id[i][0], batch.logits[i] = s, w
        assert L.llama_decode(ctx, batch) == 0
        out = {}
        for i, (_token, _pos, s, w) in enumerate(items):
            if w:
                out[s] = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
        return out

    def rows(tokens, start, end, seq, last_logits=True):
        return [(tokens[p], p, seq, last_logits and p == end - 1) for p in range(start, end)]

    def prefill(ctx, tokens, cuts, seq=0):
        """Prefill tokens[:cuts[-1]] in chunks between consecutive cuts (0 implied)."""
        start, last = 0, None
        for end in cuts:
            last = decode(ctx, rows(tokens, start, end, seq))[seq]
            start = end
        return last

    def aligned(total, size=A, start=0):
        cuts, p = [], start
        while p < total:
            p = min(total, (p // size + 1) * size)
            cuts.append(p)
        return cuts

    def greedy_tail(ctx, logits, pos, seq=0, k=16):
        """k greedy tokens by single-token decode; returns (tokens, logits after each)."""
        out, all_logits = [], []
        for _ in range(k):
            t = int(np.argmax(logits))
            out.append(t)
            logits = decode(ctx, [(t, pos, seq, True)])[seq]
            all_logits.append(logits)
            pos += 1
        return out, all_logits

    def fresh(fn):
        ctx = ctx_new()
        try:
            return fn(ctx)
        finally:
            L.llama_free(ctx)

    def diff(a, b) -> str:
        return f"{np.abs(a - b).max():.2e}"

    ref = fresh(lambda c: prefill(c, P, aligned(n)))
    print(f"\n== {os.path.basename(path)} flash_attn={FLASH_ATTN} K={CACHE_K} V={CACHE_V} "
          f"tiled_mm={os.environ.get('GGML_CPU_TILED_MM', '1')} repack={int(REPACK)}"
          f"{f' n_gpu_layers={N_GPU_LAYERS}' if N_GPU_LAYERS else ''}\n"
          f"prompt {n} tokens, reference: solo, chunks at multiples of {A}")
    print("1. whole prompt in one chunk           ", diff(fresh(lambda c: prefill(c, P, [n])), ref))
    print("1. aligned 128                         ", diff(fresh(lambda c: prefill(c, P, aligned(n, 128))), ref))
    print("1. aligned starts, lengths 64,192,rest ", diff(fresh(lambda c: prefill(c, P, [64, 256, n])), ref))
    print("1. [0,128) then the rest whole         ", diff(fresh(lambda c: prefill(c, P, [128, n])), ref))
    print("1. [0,n-1) then the last token         ", diff(fresh(lambda c: prefill(c, P, [n - 1, n])), ref))
    print("1. unaligned split at 100              ", diff(fresh(lambda c: prefill(c, P, [100, n])), ref))
    print("1. unaligned split at 37, 170          ", diff(fresh(lambda c: prefill(c, P, [37, 170, n])), ref))

    # 2. Partial chunks: prefill to an unaligned end e, then continue from the aligned floor(e) by
    #    recomputing [floor, ...) vs continuing from e directly.
    e = (n // A) * A - 20
    print("2. stop at unaligned e, go on from e   ",
          diff(fresh(lambda c: prefill(c, P, aligned(e) + aligned(n, A, e))), ref))

    def redo_from_floor(c):
        prefill(c, P, aligned(e))
        floor = (e // A) * A
        L.llama_memory_seq_rm(L.llama_get_memory(c), 0, floor, -1)
        start, last = floor, None
        for end in aligned(n, A, floor):
            last = decode(c, rows(P, start, end, 0))[0]
            start = end
        return last
    print("2. stop at e, redo from floor(e)       ", diff(fresh(redo_from_floor), ref))

    # 3. Two sequences' prefill chunks in one llama_decode (each aligned), and decode rows side by side.
    def two_prefills(c, order):
        last = None
        cp, cq = aligned(n), aligned(len(Q))
        sp = sq = 0
        for i in range(max(len(cp), len(cq))):
            items = []
            part_p = rows(P, sp, cp[i], 0) if i < len(cp) else []
            part_q = rows(Q, sq, cq[i], 1) if i < len(cq) else []
            items = part_p + part_q if order == "PQ" else part_q + part_p
            out = decode(c, items)
            if 0 in out:
                last = out[0]
            if i < len(cp):
                sp = cp[i]
            if i < len(cq):
                sq = cq[i]
        return last
    print("3. P,Q chunks in one batch (seq0 first)", diff(fresh(lambda c: two_prefills(c, "PQ")), ref))
    print("3. P,Q chunks in one batch (seq1 first)", diff(fresh(lambda c: two_prefills(c, "QP")), ref))

    def solo_decode(c):
        logits = prefill(c, P, aligned(n))
        return greedy_tail(c, logits, n)

    solo_tokens, solo_logits = fresh(solo_decode)

    def side_by_side_decode(c, others):
        logits = prefill(c, P, aligned(n))
        other = {s: prefill(c, Q, aligned(len(Q)), seq=s) for s in range(1, others + 1)}
        pos, qpos = n, len(Q)
        tokens = []
        for i in range(16):
            t = int(np.argmax(logits))
            items = [(t, pos, 0, True)]
            for s in other:
                items.append((int(np.argmax(other[s])), qpos, s, True))
            out = decode(c, items)
            logits = out[0]
            for s in other:
                other[s] = out[s]
            if i == 0:
                first = float(np.abs(logits - solo_logits[0]).max())
            tokens.append(t)
            pos += 1
            qpos += 1
        return f"{first:.2e}  (16 greedy tokens same: {tokens == solo_tokens})"
    for others in BESIDE:
        print(f"3. decode rows beside {others} other seq(s)  ", fresh(lambda c: side_by_side_decode(c, others)))

    def prefill_beside_decode(c):
        """seq 0 decodes while seq 1 prefills Q in aligned chunks in the same llama_decode."""
        logits = prefill(c, P, aligned(n))
        pos, sq, tokens = n, 0, []
        cq = aligned(len(Q))
        for i in range(16):
            t = int(np.argmax(logits))
            tokens.append(t)
            items = [(t, pos, 0, True)]
            if i < len(cq):
                items += rows(Q, sq, cq[i], 1)
                sq = cq[i]
            logits = decode(c, items)[0]
            if i == 0:
                first = float(np.abs(logits - solo_logits[0]).max())
            pos += 1
        return f"{first:.2e}  (16 greedy tokens same: {tokens == solo_tokens})"
    print("3. decode row + other seq's prefill    ", fresh(prefill_beside_decode))

    # 4. Generated KV: after the solo greedy tail, continue with a user turn; compare with a cold aligned
    #    prefill of prompt + tail + turn.
    turn = (tok("<|im_end|>\nThanks. And suspension bridges?")[1:] if L.llama_vocab_get_add_bos(vocab)
            else tok("Thanks."))
    full = P + solo_tokens + turn
    cold = fresh(lambda c: prefill(c, full, aligned(len(full))))

    def redo(c, tokens, start, total, seq=0, want=True):
        """Drop seq's cells from `start` on and prefill tokens[start:total] again in aligned chunks."""
        L.llama_memory_seq_rm(L.llama_get_memory(c), seq, start, -1)
        last = None
        for end in aligned(total, A, start):
            last = decode(c, rows(tokens, start, end, seq, want)).get(seq)
            start = end
        return last

    def answered(c):
        """Prefill P, generate the greedy answer; return (floor of the prompt, end of the answer)."""
        greedy_tail(c, prefill(c, P, aligned(n)), n)
        return (n // A) * A, n + len(solo_tokens)

    def reuse_generated(c):
        _, end_answer = answered(c)
        return decode(c, rows(full, end_answer, len(full), 0))[0]
    print("4. reuse decode-made KV, prefill turn  ", diff(fresh(reuse_generated), cold))

    def reuse_aligned_floor(c):
        floor, _ = answered(c)
        return redo(c, full, floor, len(full))
    print("4. reuse to floor(prompt), redo rest   ", diff(fresh(reuse_aligned_floor), cold))

    def reuse_after_reprefill(c):
        """The idle re-prefill: after the answer, redo [floor(prompt), end of answer), keep its aligned floor."""
        floor, end_answer = answered(c)
        redo(c, full, floor, end_answer, want=False)
        return redo(c, full, (end_answer // A) * A, len(full))
    print("4. idle re-prefill, reuse its floor    ", diff(fresh(reuse_after_reprefill), cold))

    def reuse_after_reprefill_partial(c):
        """Same, but also reuse the re-prefilled partial chunk past the aligned floor."""
        floor, end_answer = answered(c)
        redo(c, full, floor, end_answer, want=False)
        return decode(c, rows(full, end_answer, len(full), 0))[0]
    print("4. idle re-prefill, reuse partial too  ", diff(fresh(reuse_after_reprefill_partial), cold))

    # 5. Copy a cached prefix into another stream: seq_cp(0 -> 1, whole) then seq_rm(1, floor, -1).
    def copied(c):
        prefill(c, P, aligned(n))
        mem = L.llama_get_memory(c)
        L.llama_memory_seq_cp(mem, 0, 1, -1, -1)
        floor = ((n - 30) // A) * A
        L.llama_memory_seq_rm(mem, 1, floor, -1)
        start, last = floor, None
        for end in aligned(n, A, floor):
            last = decode(c, rows(P, start, end, 1))[1]
            start = end
        return last
    print("5. seq_cp to another stream + redo tail", diff(fresh(copied), ref))


if __name__ == "__main__":
    for model_path in sys.argv[1:]:
        main(model_path)
