"""Are an answer's KV cells, made one token at a time, bitwise what a prefill of the same tokens makes? Measured.

llama.cpp's CPU numerics for a row depend on the kernels its batch's shape picks: llamafile's
GEMM (F16, Q8_0, Q4_0... weights, and the attention products over the F16/Q8_0/Q4_0 K cache)
from two rows on, a one-row path below; K-quant weights another split of their own. Where none
is in play (a build without GGML_LLAMAFILE, weights that have none, no flash attention), each
output is one dot product whatever the batch, and the cells an answer made token by token equal
a cold prefill's (bench/probes/kvrule.py, bench/probes/RESULTS.md): exact mode may reuse answers
too. Which kernels a model and a backend take is not something flags and tensor types tell
reliably, so the engine asks the numerics: at load it makes one prompt's cells both ways in slot
0, in several shapes, and compares the logits that follow them, bitwise; only where the code
leaves room for a yes (the CPU backend of a build without llamafile) is the answer measured.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from worker.engine.model import LlamaModel

# The probe: PROBE_TOKENS prefilled as one chunk (as large as a real prompt's chunks, so that kernels which change
# with size are taken), then, for each (kept, decoded), its cells from `kept` on made again: `decoded` of them one
# token at a time (as an answer's are), the rest as one chunk (as a next turn's prompt is). Several shapes, because
# kernels that differ by shape can agree on one: llamafile's GEMM agreed with one-row decode on 1 of 10 shapes.
PROBE_TOKENS = 64
SHAPES = ((21, 16), (48, 8), (58, 4))


def decoded_cells_exact(model: LlamaModel) -> bool:
    """True if prompts whose middle was decoded token by token end in the logits of a cold prefill.

    Measured only on the CPU backend of a build without llamafile, where each product is one dot product per
    output whatever the batch; elsewhere False: llamafile's attention products differ by shape on every model,
    and GPU kernels change with batch size in ways no probe of a few shapes covers. Runs on the engine thread
    before any request, in slot 0, which it leaves empty.
    """
    config = model.config
    if config.backend != "cpu" or config.rpc_servers or b"LLAMAFILE = 1" in llama_cpp.llama_print_system_info():
        return False
    if model.n_ctx_seq < PROBE_TOKENS or min(config.batch_size, config.ubatch_size) < PROBE_TOKENS:
        return False
    return decode_matches_prefill(model)


def decode_matches_prefill(model: LlamaModel) -> bool:
    """The measurement itself: prefill the probe, then make its tail again in each shape; the same logits?"""
    tokens = [(101 + 7 * i) % model.n_vocab for i in range(PROBE_TOKENS)]
    batch = llama_cpp.llama_batch_init(PROBE_TOKENS, 0, 1)
    try:
        cold = _logits_after(model, batch, tokens, [(0, PROBE_TOKENS)])
        for kept, decoded in SHAPES:
            llama_cpp.llama_memory_seq_rm(model.memory, 0, kept, -1)
            one_by_one = [(pos, pos + 1) for pos in range(kept, kept + decoded)]
            if cold is None or _logits_after(model, batch, tokens, [*one_by_one, (kept + decoded, PROBE_TOKENS)]) != cold:
                return False
        return True
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_memory_seq_rm(model.memory, 0, -1, -1)


def _logits_after(model: LlamaModel, batch: llama_cpp.llama_batch, tokens: list[int],
                  chunks: list[tuple[int, int]]) -> bytes | None:
    """Decode each chunk of `tokens` in slot 0 as one llama_decode call; the logits of the prompt's last row."""
    for start, end in chunks:
        for row, pos in enumerate(range(start, end)):
            batch.token[row], batch.pos[row], batch.n_seq_id[row] = tokens[pos], pos, 1
            batch.seq_id[row][0], batch.logits[row] = 0, pos == len(tokens) - 1
        batch.n_tokens = end - start
        if llama_cpp.llama_decode(model.ctx, batch) != 0:
            return None
    return ctypes.string_at(llama_cpp.llama_get_logits_ith(model.ctx, -1), model.n_vocab * ctypes.sizeof(ctypes.c_float))
