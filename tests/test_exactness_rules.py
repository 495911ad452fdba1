"""What exact and off modes choose before a model loads: the attention (attention.py) and the ggml CPU settings
per weight type (kernels.py). Rules only; tests/test_numerics.py measures what they buy."""

from __future__ import annotations

import pytest

from tests.test_cli import one_line_failure, run_cli
from worker.engine.attention import Attention, plan_attention
from worker.engine.kernels import FASTEST, Kernels, choose_kernels, weight_types
from worker.engine.prefix_cache import CacheMode
from worker.errors import WorkerError

EXACT, OFF, FAST = CacheMode.EXACT, CacheMode.OFF, CacheMode.FAST
PINNED = Attention("on", "q8_0", "f16", pinned=True)
UNFUSED = Attention("off", "f16", "f16", pinned=False)


@pytest.mark.parametrize(("backend", "rpc", "mode", "flash", "k", "v", "expected"), [
    ("cpu", False, EXACT, "auto", None, None, PINNED),
    ("cpu", False, OFF, "auto", None, None, PINNED),  # off computes as exact does: their texts are compared
    ("cpu", False, EXACT, "on", None, None, PINNED),
    ("cpu", False, EXACT, "auto", "f16", None, Attention("on", "f16", "bf16", pinned=True)),
    ("cpu", False, EXACT, "auto", "q8_0", "q8_0", Attention("on", "q8_0", "q8_0", pinned=True)),  # K not F16: no tiling
    ("cpu", False, EXACT, "auto", "f16", "f16", UNFUSED),  # one F16 type would let llama.cpp pick by shape
    ("cpu", False, EXACT, "off", None, None, UNFUSED),
    ("cpu", False, EXACT, "off", "q8_0", None, Attention("off", "q8_0", "f16", pinned=False)),
    ("cpu", True, EXACT, "auto", None, None, UNFUSED),
    ("cuda", False, EXACT, "auto", None, None, UNFUSED),
    ("cpu", False, FAST, "auto", None, None, Attention("auto", "f16", "f16", pinned=False)),
    ("cuda", False, FAST, "on", "q8_0", "q8_0", Attention("on", "q8_0", "q8_0", pinned=False)),
])
def test_attention_plan(backend, rpc, mode, flash, k, v, expected):
    assert plan_attention(backend, rpc, mode, flash, k, v) == expected


@pytest.mark.parametrize(("backend", "rpc", "flash", "v", "named"), [
    ("cpu", False, "on", "f16", "--cache-type-v other than f16"),  # with --cache-type-k f16, below
    ("cuda", False, "on", None, "needs the cpu backend"),
    ("cpu", True, "on", None, "without --rpc"),
    ("cpu", False, "off", "q8_0", "--cache-type-v q8_0 needs flash attention"),
    ("cuda", False, "auto", "bf16", "--cache-type-v bf16 needs flash attention"),
])
def test_attention_flags_that_break_exactness_say_what_to_change(backend, rpc, flash, v, named):
    with pytest.raises(WorkerError, match=named):
        plan_attention(backend, rpc, EXACT, flash, "f16" if v == "f16" else None, v)


def test_serve_refuses_them_in_one_line_before_loading(tmp_path):
    result = run_cli("serve", "--model", str(tmp_path / "none.gguf"), "--flash-attn", "on", "--cache-type-k", "f16",
                     "--cache-type-v", "f16")
    assert "--cache-type-v other than f16" in one_line_failure(result)


@pytest.mark.parametrize(("qtype", "types", "exact_kernels"), [
    (None, {"q4_1", "q8_0"}, Kernels(tiled_mm=False, repack=True)),  # the test model as shipped
    ("q4_0", {"q4_0"}, Kernels(tiled_mm=False, repack=True)),  # Q4_0's repacked GEMM and GEMV agree
    ("q6_k", {"q6_K", "q8_0"}, Kernels(tiled_mm=False, repack=True)),
    ("q4_k_m", {"q4_K", "q6_K", "q5_0"}, Kernels(tiled_mm=False, repack=False)),  # Q4_K's repacked ones differ
])
def test_kernels_per_weight_type(model_path, quantized, qtype, types, exact_kernels):
    path = quantized(qtype) if qtype else model_path
    assert types <= set(weight_types(path))
    assert choose_kernels(path, row_invariant=True) == exact_kernels
    assert choose_kernels(path, row_invariant=False) == FASTEST


def test_weight_types_of_a_file_that_is_not_gguf(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    assert not weight_types(bogus)


def test_heads_too_narrow_for_q8_0_blocks_keep_k_in_f16_and_v_in_bf16():
    """q8_0 packs 32 values a block; a model with 16-wide heads cannot store K that way, so exact mode takes the
    other pinned pair (and a K type the user named is left to llama.cpp to accept or refuse)."""
    assert plan_attention("cpu", False, EXACT, "auto", None, None, head_size=16) == Attention("on", "f16", "bf16", True)
    assert plan_attention("cpu", False, EXACT, "auto", None, None, head_size=64) == PINNED
    assert plan_attention("cpu", False, EXACT, "auto", "q8_0", None, head_size=16).cache_type_k == "q8_0"
