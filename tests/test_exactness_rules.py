"""What exact and off modes choose before a model loads: the attention (exactness/kv_plan.py), the llama.cpp library
(exactness/build_choice.py) and the ggml CPU settings (exactness/ggml_switches.py) per weight type. Rules only; tests/test_numerics.py measures
what they buy."""

from __future__ import annotations

import pytest

from tests.test_cli import one_line_failure, run_cli
from worker.engine.exactness.kv_plan import Attention, plan_attention
from worker.engine.config import EngineConfig
from worker.engine.modes import SpecType
from worker.engine.exactness.ggml_switches import FASTEST, Kernels, choose_kernels
from worker.engine.exactness.build_choice import BATCH_INVARIANT_DIR, LIB_PATH_ENV, choose_library, default_dir
from worker.engine.modes import CacheMode
from worker.engine.exactness.tensor_table import weight_product_types
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
    """Without the batch-invariant build (here: llama-cpp-python's own named); with it, f16/f16 is exact mode's pair."""
    result = run_cli("serve", "--model", str(tmp_path / "none.gguf"), "--flash-attn", "on", "--cache-type-k", "f16",
                     "--cache-type-v", "f16", env={LIB_PATH_ENV: str(default_dir())})
    assert "--cache-type-v other than f16" in one_line_failure(result)


# The table in bench/WEIGHTS.md: per weight type, what exact mode loads on the cpu backend (the batch-invariant
# build for every type; the kernels here are the fallback's, without it).
@pytest.mark.parametrize(("qtype", "types", "library", "exact_kernels"), [
    (None, {"Q4_1", "Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),  # the test model as shipped
    ("q4_0", {"Q4_0", "Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),  # Q4_0's repacked GEMM and GEMV agree
    ("q5_0", {"Q5_0", "Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),
    ("q8_0", {"Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),
    ("q6_k", {"Q6_K", "Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),
    # Q4_K's repacked GEMM and GEMV differ
    ("q4_k_m", {"Q4_K", "Q6_K", "Q5_0", "Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=False)),
    ("f16", {"F16"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),  # llamafile's F16 GEMM from 2 rows
    ("bf16", {"BF16"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),
])
def test_choices_per_weight_type(model_path, quantized, monkeypatch, qtype, types, library, exact_kernels):
    monkeypatch.delenv(LIB_PATH_ENV, raising=False)
    path = quantized(qtype) if qtype else model_path
    assert types == set(weight_product_types(path))
    assert choose_kernels(path, row_invariant=True) == exact_kernels
    assert choose_kernels(path, row_invariant=False) == FASTEST
    for mode in (EXACT, OFF):  # off computes as exact does: their texts are compared
        chosen = choose_library(path, EngineConfig(prefix_cache=mode))
        where = BATCH_INVARIANT_DIR if library == "batch-invariant" else default_dir()
        assert (chosen.build, chosen.path) == (library, str(where))
    # Where rows may depend on their batch, or off the cpu, the default build: the fastest for every type.
    for config in (EngineConfig(prefix_cache=FAST), EngineConfig(backend="cuda"), EngineConfig(rpc_servers=("h:1",))):
        assert choose_library(path, config).build == "default"


def test_attention_without_flash_attention_takes_the_batch_invariant_build(model_path, monkeypatch, tmp_path):
    monkeypatch.delenv(LIB_PATH_ENV, raising=False)
    for flags in ({"flash_attn": "off"}, {"cache_type_k": "f16", "cache_type_v": "f16"}):  # both unfused without it
        assert choose_library(model_path, EngineConfig(**flags)).build == "batch-invariant"
        fallback = choose_library(model_path, EngineConfig(**flags), patched=tmp_path / "absent")
        assert fallback.fallback and "attention without flash attention" in fallback.reason


def test_the_batch_invariant_build_is_installed():
    """`make install` builds it (Makefile); without it exact mode falls back to slower pinned kernels, and F16
    weights lose both guarantees."""
    assert (BATCH_INVARIANT_DIR / "libllama.so").exists(), f"{BATCH_INVARIANT_DIR} is missing: run make install"


def test_library_choice_without_the_build_says_what_is_missing(quantized, tmp_path, monkeypatch):
    monkeypatch.delenv(LIB_PATH_ENV, raising=False)
    chosen = choose_library(quantized("f16"), EngineConfig(), patched=tmp_path / "absent")
    assert chosen.build == "default" and "make install" in chosen.reason and "F16" in chosen.reason


def test_the_users_library_path_wins(quantized, monkeypatch):
    monkeypatch.setenv(LIB_PATH_ENV, "/opt/mine")
    assert choose_library(quantized("f16"), EngineConfig()).path == "/opt/mine"


def test_weight_types_of_files_that_are_not_gguf(tmp_path):
    for name, content in (("truncated", b"GGUF" + b"\0" * 64), ("empty", b""), ("other", b"PK\3\4" + b"\0" * 60)):
        bogus = tmp_path / f"{name}.gguf"
        bogus.write_bytes(content)
        assert not weight_product_types(bogus)
    assert not weight_product_types(tmp_path / "missing.gguf")


def test_heads_too_narrow_for_q8_0_blocks_keep_k_in_f16_and_v_in_bf16():
    """q8_0 packs 32 values a block; a model with 16-wide heads cannot store K that way, so exact mode takes the
    other pinned pair (and a K type the user named is left to llama.cpp to accept or refuse)."""
    assert plan_attention("cpu", False, EXACT, "auto", None, None, head_size=16) == Attention("on", "f16", "bf16", True)
    assert plan_attention("cpu", False, EXACT, "auto", None, None, head_size=64) == PINNED
    assert plan_attention("cpu", False, EXACT, "auto", "q8_0", None, head_size=16).cache_type_k == "q8_0"


def test_a_mode_given_by_its_name_is_that_mode():
    """The engine tells modes apart by identity: a config built with the name "fast" must not run as exact."""
    config = EngineConfig(prefix_cache="fast", spec_type="ngram")
    assert config.prefix_cache is FAST and config.spec_type is SpecType.NGRAM
    assert config.attention() == Attention("auto", "f16", "f16", pinned=False)
    with pytest.raises(ValueError):
        EngineConfig(prefix_cache="fastest")
