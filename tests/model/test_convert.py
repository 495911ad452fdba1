"""SafeTensors -> GGUF against llama.cpp's own F16 of the test model (see tests/fixtures/make_hf_folder.py).

A Q4 model and its F16 dequantization do not give the same greedy text, so the converted
model is never compared with the Q4 original: only with llama.cpp's dequantization of it
(served, in tests/e2e/test_convert.py).

The whole-model comparisons are probes (~10 s each on 2 cores: make test-probes, which CI runs after make test);
make test keeps the converted cache and the tokenizer, and tests/e2e/test_convert_archs.py converts and serves a tiny
model of each architecture.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from gguf.quants import dequantize

from tests.convert_helpers import hf, mismatches  # noqa: F401 (a fixture)
from tests.gguf_files import read_gguf
from worker.engine.host import quantize_model
from worker.source.convert import Conversion, converted_model
from worker.source.convert.write import convert_folder


@pytest.fixture(scope="module")
def converted_f16(hf, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("f16") / "model.f16.gguf"
    convert_folder(hf.f32, out, "f16")
    return out


@pytest.mark.probe
def test_f16_equals_llama_cpp_dequantization_byte_for_byte(hf, converted_f16):
    assert mismatches(converted_f16, hf.reference_f16) == []


@pytest.mark.probe
def test_sharded_input_gives_the_same_file(hf, converted_f16, tmp_path):
    convert_folder(hf.sharded, tmp_path / "sharded.gguf", "f16")
    assert mismatches(tmp_path / "sharded.gguf", converted_f16) == []


@pytest.mark.probe
def test_bf16_input_equals_f32_input_for_bf16_output(hf, tmp_path):
    convert_folder(hf.f32, tmp_path / "from-f32.gguf", "bf16")
    convert_folder(hf.bf16, tmp_path / "from-bf16.gguf", "bf16")
    assert mismatches(tmp_path / "from-f32.gguf", tmp_path / "from-bf16.gguf") == []
    types = {t.tensor_type.name for t in read_gguf(tmp_path / "from-bf16.gguf").tensors}
    assert types == {"BF16", "F32"}


@pytest.mark.probe
def test_q8_0_is_within_one_step_of_the_reference(hf, tmp_path):
    convert_folder(hf.f32, tmp_path / "q8.gguf", "q8_0")
    reference = {t.name: t for t in read_gguf(hf.reference_f16).tensors}
    for t in read_gguf(tmp_path / "q8.gguf").tensors:
        ref = dequantize(reference[t.name].data, reference[t.name].tensor_type).reshape(-1, 32)
        if t.tensor_type.name == "F32":  # norms stay f32, exactly
            assert t.data.tobytes() == reference[t.name].data.tobytes(), t.name
            continue
        assert t.tensor_type.name == "Q8_0", t.name
        got = dequantize(t.data, t.tensor_type).reshape(-1, 32)
        step = np.abs(ref).max(axis=1, keepdims=True) / 127  # one Q8_0 step of each 32-value block
        assert (np.abs(got - ref) <= step * 1.0001 + 1e-7).all(), t.name


@pytest.mark.probe
def test_quantize_q4_k_m_equals_llama_quantize_of_the_reference(hf, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_WORKER_CACHE", str(tmp_path))
    path = converted_model(hf.f32, Conversion("f16", "q4_k_m", quantize_model))
    assert mismatches(path, hf.reference_q4_k_m) == []


def test_second_load_reuses_the_cache_in_well_under_a_second(hf, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_WORKER_CACHE", str(tmp_path))
    seen = []
    first = converted_model(hf.f32, Conversion(), lambda stage, done, total: seen.append((stage, done, total)))
    assert seen[-1] == ("convert", 272, 272) and len(seen) == 272
    started = time.monotonic()
    again = converted_model(hf.f32, Conversion())
    assert again == first and time.monotonic() - started < 0.5


def _tokenize(path: Path, text: str) -> list[int]:
    import llama_cpp

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        data = text.encode()
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, len(buf), True, True)
        return buf[:n]
    finally:
        llama_cpp.llama_model_free(model)


TOKENIZER_TEXT = (
    "Digits 1234567890 3.14159 and 2024-11-23, emoji 🚀😶‍🌫️🦙✅, CJK 我想在apple工作 こんにちは 안녕하세요,\n"
    "code:\ndef square(x: int) -> int:\n\treturn x ** 2  # ok\n"
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n"
)


def test_tokenizer_gives_the_original_ids(hf, model_path, converted_f16):
    original = _tokenize(model_path, TOKENIZER_TEXT)
    assert _tokenize(converted_f16, TOKENIZER_TEXT) == original
    assert 1 in original and 2 in original  # the chat template's specials are single control tokens
