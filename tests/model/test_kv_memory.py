"""A KV cache is resident only where cells were written (patch 0013): llama.cpp clears a new context's cache, and
llama_memory_clear(mem, true) clears it again, to zero; the CPU backend now gives the cleared pages back
(madvise(MADV_DONTNEED)) instead of writing zeros over them, and they read as zeros again. Without the patch, the
first assertion fails by the whole cache (the memset makes every page resident)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import pytest

N_CTX = 8192  # the bench's cache: 8192 cells in f16, 180 MiB for the test model
PROMPT = 512  # cells written, 11.25 MiB


def _rss() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) * 1024


@pytest.fixture
def model(model_path: Path) -> Iterator[llama_cpp.llama_model_p]:
    params = llama_cpp.llama_model_default_params()
    params.use_mmap = False  # the weights resident before the context is made, not faulted in by its first decode
    loaded = llama_cpp.llama_model_load_from_file(str(model_path).encode(), params)
    assert loaded
    yield loaded
    llama_cpp.llama_model_free(loaded)


def _kv_bytes(model: llama_cpp.llama_model_p, cells: int) -> int:
    """K and V in f16: per cell and layer, the K/V heads' width twice."""
    head_kv = llama_cpp.llama_model_n_head_kv(model)
    width = llama_cpp.llama_model_n_embd(model) // llama_cpp.llama_model_n_head(model) * head_kv
    return cells * llama_cpp.llama_model_n_layer(model) * 2 * width * 2


def _last_logits(ctx: llama_cpp.llama_context_p, tokens: list[int]) -> bytes:
    array = (llama_cpp.llama_token * len(tokens))(*tokens)  # kept alive: the batch points into it
    batch = llama_cpp.llama_batch_get_one(array, len(tokens))
    assert llama_cpp.llama_decode(ctx, batch) == 0
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx)))
    return ctypes.string_at(llama_cpp.llama_get_logits_ith(ctx, -1), n_vocab * 4)


def test_cleared_cells_are_not_resident_and_read_as_zeros(model):
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_threads = N_CTX, PROMPT, 256, 2
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    before = _rss()
    ctx = llama_cpp.llama_init_from_model(model, params)
    assert ctx
    try:
        made = _rss() - before
        cache = _kv_bytes(model, N_CTX)
        assert made < cache // 4, f"a new context made {made >> 20} MiB resident; its KV cache is {cache >> 20} MiB"

        tokens = [(7 * i) % 4000 + 100 for i in range(PROMPT)]
        first = _last_logits(ctx, tokens)
        written = _rss()
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        given_back = written - _rss()
        assert given_back > _kv_bytes(model, PROMPT) // 2, f"the clear gave back {given_back >> 20} MiB"

        # The pages given back are written again as new: the same prompt, the same logits.
        assert _last_logits(ctx, tokens) == first
    finally:
        llama_cpp.llama_free(ctx)
