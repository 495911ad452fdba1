"""What exact and off modes choose before a model loads, per weight type of the test model and its quantizations:
the llama.cpp library (exactness/build_choice.py) and the ggml CPU settings (exactness/ggml_switches.py). Rules
only; tests/model/test_numerics.py measures what they buy."""

from __future__ import annotations

import numpy as np
import pytest

from bench.adapters import write_adapter
from worker.engine.config import EngineConfig, Lora
from worker.engine.exactness.build_choice import BATCH_INVARIANT_DIR, LIB_PATH_ENV, choose_library, default_dir
from worker.engine.exactness.ggml_switches import FASTEST, Kernels, choose_kernels
from worker.engine.exactness.tensor_table import weight_product_types
from worker.engine.modes import CacheMode

EXACT, OFF, FAST = CacheMode.EXACT, CacheMode.OFF, CacheMode.FAST


# The table in bench/WEIGHTS.md: per weight type, what exact mode loads on the cpu backend (the batch-invariant
# build for every type; the kernels here are the fallback's, without it).
@pytest.mark.parametrize(("qtype", "types", "library", "exact_kernels"), [
    (None, {"Q4_1", "Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),  # the test model as shipped
    # Q4_0's repacked GEMM and GEMV agree
    ("q4_0", {"Q4_0", "Q8_0"}, "batch-invariant", Kernels(tiled_mm=False, repack=True)),
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


def test_adapter_tensors_are_held_by_the_batch_invariant_build(model_path, monkeypatch, tmp_path):
    """An adapter's F16 products are llamafile's from 2 rows, as F16 weights': the patched build takes them per row
    (patch 0004); the fallback cannot, and says so."""
    monkeypatch.delenv(LIB_PATH_ENV, raising=False)
    pair = np.full((8, 576), 0.01, np.float32), np.full((576, 8), 0.01, np.float32)
    adapter = write_adapter(tmp_path / "a.gguf", "llama", {"blk.0.attn_q.weight": pair}, "a")
    config = EngineConfig(lora=(Lora(adapter, "a"),))
    assert choose_library(model_path, config).build == "batch-invariant"
    fallback = choose_library(model_path, config, patched=tmp_path / "absent")
    assert fallback.fallback and "F16 LoRA adapter tensors" in fallback.reason


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
