"""Tiny random-weight folders of the other supported families: convert, load in llama.cpp, generate,
and carry config.json's settings into the GGUF metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import start_worker
from tests.convert_helpers import oracle, post
from tests.fixtures.tiny_models import TINY, make_tiny
from tests.gguf_files import read_gguf
from worker.source.convert import Conversion, converted_model

# GGUF key (after "<arch>.") -> config.json key
METADATA = {
    "block_count": "num_hidden_layers",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "rope.freq_base": "rope_theta",
    "context_length": "max_position_embeddings",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.sliding_window": "sliding_window",
}
GGUF_ARCH = {"qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3", "gemma2": "gemma2", "gemma3": "gemma3"}
# Settings llama.cpp's loader does not read for a family are not written either (as its converter does).
NOT_WRITTEN = {("qwen2", "attention.sliding_window"), ("qwen3", "attention.sliding_window")}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("name", list(TINY))
def test_tiny_model_converts_loads_and_generates(name, model_path, cache, tmp_path, monkeypatch):
    folder = make_tiny(name, tmp_path / f"tiny-{name}", oracle(model_path).f32)
    config = json.loads((folder / "config.json").read_text())
    monkeypatch.setenv("LLM_WORKER_CACHE", str(cache))
    fields = read_gguf(converted_model(folder, Conversion())).fields
    arch = GGUF_ARCH[name]
    assert fields["general.architecture"].contents() == arch
    for key, config_key in METADATA.items():
        if (name, key) in NOT_WRITTEN:
            assert f"{arch}.{key}" not in fields
            continue
        assert fields[f"{arch}.{key}"].contents() == pytest.approx(config[config_key], rel=1e-6), key
    if name == "gemma3":
        assert fields["gemma3.rope.freq_base_swa"].contents() == config["rope_local_base_freq"]
    if name == "gemma2":
        assert fields["gemma2.attn_logit_softcapping"].contents() == config["attn_logit_softcapping"]

    worker = start_worker(tmp_path, "--model", str(folder), "--parallel", "1", "--ctx-size", "256", "--threads", "1",
                          env={"LLM_WORKER_CACHE": str(cache)})
    try:
        answer = post(worker.url + "/v1/completions", {"prompt": "Hello world", "max_tokens": 8, "temperature": 0})
        assert answer["usage"]["completion_tokens"] >= 1
        assert '"converted_cache_hit"' in worker.log()  # converted above, reused by the worker
    finally:
        assert worker.stop() == 0
