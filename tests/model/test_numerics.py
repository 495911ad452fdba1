"""The load-time check behind exact mode's reuse of answers (worker/engine/startup/load_check.py), on this build:
where it must pass and where it must fail."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import llama_cpp
import pytest

from worker.engine.exactness.ggml_switches import TILED_MM_ENV
from worker.engine.native.model import EngineConfig, LlamaModel
from worker.engine.startup.load_check import Numerics, decode_matches_prefill, measure

LLAMAFILE = b"LLAMAFILE = 1" in llama_cpp.llama_print_system_info()


@pytest.fixture
def load(monkeypatch):
    """A model in this process; what exact mode sets in the environment for ggml is undone after the test."""
    monkeypatch.setenv(TILED_MM_ENV, "0")
    loaded: list[LlamaModel] = []

    def _load(path: Path, **config) -> LlamaModel:
        loaded.append(LlamaModel(path, EngineConfig(ctx_size=1024, parallel=2, **config)))
        return loaded[-1]

    yield _load
    for model in loaded:
        assert all(llama_cpp.llama_memory_seq_pos_max(model.memory, slot) == -1 for slot in (0, 1))  # left empty
        model.close()


def test_pinned_flash_attention_makes_answers_reusable_on_this_build(model_path, load):
    """Flash attention held to its per-row kernel (exactness/kv_plan.py) keeps the attention products out of llamafile's
    GEMM: the test model's Q4_1 rows follow the row alone, on the default build as on one without llamafile."""
    model = load(model_path)
    assert model.attention.pinned
    assert measure(model) == Numerics(decoded_cells_exact=True, batch_invariant=True, trusted=True,
                                      moved_cells_exact=True)


def test_without_flash_attention_llamafile_shows(model_path, load):
    """llamafile's GEMM computes a prefill's attention rows other than one-row decode does (bench/probes/kvrule.py:
    0.51 on the test model's logits): the measurement sees it (a worker loads the batch-invariant build for this,
    exactness/build_choice.py; this test process has the default one)."""
    model = load(model_path, flash_attn="off")
    assert not model.attention.pinned
    assert decode_matches_prefill(model) is (not LLAMAFILE)
    assert measure(model).answers_reusable is (not LLAMAFILE)


def test_f16_weights_fail_both_measurements_where_llamafile_takes_them(quantized, load):
    """F16 weights go through llamafile's GEMM from two rows on, with no switch at run time: the check must say no
    to both questions there (and yes on a build without llamafile)."""
    model = load(quantized("f16"))
    assert measure(model) == Numerics(not LLAMAFILE, not LLAMAFILE, trusted=True, moved_cells_exact=True)


@pytest.mark.parametrize("off_cpu", [{"backend": "cuda"}, {"rpc_servers": ("127.0.0.1:50052",)}],
                         ids=["cpu-model-configured-as-cuda", "cpu-model-configured-with-rpc"])
def test_trust_follows_the_configured_backend_not_the_measurement(model_path, load, off_cpu):
    """Trust is read from the config alone (EngineConfig.on_cpu_alone): on a GPU or over rpc a yes from a few shapes
    does not stand for a GPU library's batch-size heuristics, so exact mode keeps its block rule there. This runs on
    this CPU, with no GPU and no rpc server: the model loaded here is measured once as configured (cpu), once with
    its config saying `off_cpu`; the same kernels give the same yes, and only its trust goes. A real GPU backend's
    measurement is tests/e2e/test_gpu_backends.py's (lavapipe)."""
    model = load(model_path)
    on_cpu = measure(model)
    object.__setattr__(model, "config", replace(model.config, **off_cpu))
    configured_off_cpu = measure(model)
    assert on_cpu.answers_reusable
    assert configured_off_cpu == replace(on_cpu, trusted=False)
    assert not configured_off_cpu.answers_reusable
