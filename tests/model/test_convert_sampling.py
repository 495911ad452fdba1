"""A SafeTensors folder's generation_config.json into the GGUF's general.sampling.* keys, as llama.cpp's converter
writes them, and back out of the GGUF as the sampling defaults llama.cpp reads (on a tiny random-weight folder)."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import gguf
import llama_cpp
import pytest

from tests.fixtures.tiny_models import make_tiny
from tests.gguf_files import read_gguf
from worker.api.model_sampling import GGUF, model_defaults
from worker.source.convert import Conversion, converted_model
from worker.worker_error import WorkerError

# As Hugging Face writes one: do_sample and the lengths are not sampling stages, and have no key.
GENERATION = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.02,
              "repetition_penalty": 1.1, "max_new_tokens": 512, "eos_token_id": 2}
KEYS = {"general.sampling.top_k": (20, gguf.GGUFValueType.INT32),
        "general.sampling.top_p": (0.95, gguf.GGUFValueType.FLOAT32),
        "general.sampling.min_p": (0.02, gguf.GGUFValueType.FLOAT32),
        "general.sampling.temp": (0.6, gguf.GGUFValueType.FLOAT32),
        "general.sampling.penalty_repeat": (1.1, gguf.GGUFValueType.FLOAT32)}


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("LLM_WORKER_CACHE", str(tmp_path / "cache"))
    return make_tiny("gemma2", tmp_path / "tiny-gemma2", tmp_path)  # a SentencePiece family: its own tokenizer


def _llama_cpp_metadata(path: Path, keys) -> dict[str, str]:
    """The keys as llama.cpp prints them, read by llama.cpp from the file (its vocabulary alone loaded)."""
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model
    try:
        buf = ctypes.create_string_buffer(128)
        return {key: buf.value.decode() for key in keys
                if llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf)) >= 0}
    finally:
        llama_cpp.llama_model_free(model)


def test_generation_config_becomes_the_sampling_keys_llama_cpp_reads(tiny):
    (tiny / "generation_config.json").write_text(json.dumps(GENERATION))
    path = converted_model(tiny, Conversion())
    fields = read_gguf(path).fields
    written = {key: (fields[key].contents(), fields[key].types[0]) for key in fields if key.startswith(
        "general.sampling.")}
    assert written == {key: (pytest.approx(value), kind) for key, (value, kind) in KEYS.items()}
    names = list(fields)
    assert max(names.index(key) for key in KEYS) < names.index("general.name")  # where llama.cpp's converter puts them
    defaults = model_defaults({}, _llama_cpp_metadata(path, KEYS))
    p = defaults.params
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty) == (0.6, 20, 0.95, 0.02, 1.1)
    assert {defaults.origins[name] for name in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty")} == {GGUF}


def test_a_folder_without_one_gets_no_keys_and_an_edited_one_converts_again(tiny):
    plain = converted_model(tiny, Conversion())
    assert not [key for key in read_gguf(plain).fields if key.startswith("general.sampling.")]
    (tiny / "generation_config.json").write_text(json.dumps({"temperature": 0.7}))
    warm = converted_model(tiny, Conversion())
    (tiny / "generation_config.json").write_text(json.dumps({"temperature": 0.3}))
    cool = converted_model(tiny, Conversion())
    assert len({plain, warm, cool}) == 3
    assert read_gguf(cool).fields["general.sampling.temp"].contents() == pytest.approx(0.3)
    assert converted_model(tiny, Conversion()) == cool  # unchanged: the cache's


def test_an_unreadable_generation_config_is_named(tiny):
    (tiny / "generation_config.json").write_text("{not json")
    with pytest.raises(WorkerError, match=r"generation_config\.json.*fix it, or remove it"):
        converted_model(tiny, Conversion())
