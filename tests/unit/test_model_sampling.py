"""A model's sampling defaults, field by field: its models.toml entry's, else its GGUF's general.sampling.* keys (as
llama.cpp prints them), else llama-server's; a bad value names its source and how to override it."""

from __future__ import annotations

import pytest

from worker.api.model_sampling import (
    GGUF,
    LLAMA_SERVER,
    LLAMA_SERVER_DEFAULTS,
    MODELS_TOML,
    gguf_sampling,
    model_defaults,
)
from worker.engine import SamplingParams
from worker.worker_error import WorkerError

# As llama_model_meta_val_str prints them: integers plainly, floats with six decimals, the sequence as written.
METADATA = {"general.architecture": "llama", "general.sampling.top_k": "20", "general.sampling.top_p": "0.800000",
            "general.sampling.temp": "0.600000", "general.sampling.sequence": "top_k;top_p;temperature",
            "general.sampling.mirostat": "0", "general.sampling.penalty_repeat": "1.050000"}


def test_the_gguf_keys_read_as_the_request_fields_they_set():
    assert gguf_sampling(METADATA) == {"top_k": 20, "top_p": 0.8, "temperature": 0.6, "mirostat": 0,
                                       "repeat_penalty": 1.05, "samplers": ["top_k", "top_p", "temperature"]}


def test_without_an_entry_or_keys_a_model_samples_as_llama_server_does():
    defaults = model_defaults({}, {"general.architecture": "llama"})
    assert defaults.params == LLAMA_SERVER_DEFAULTS
    assert (defaults.params.temperature, defaults.params.top_k, defaults.params.top_p, defaults.params.min_p) == (
        0.8, 40, 0.95, 0.05)
    assert set(defaults.origins.values()) == {LLAMA_SERVER}
    assert SamplingParams() != LLAMA_SERVER_DEFAULTS  # the neutral chain stays what SamplingParams() means


def test_each_field_comes_from_the_entry_else_the_gguf_else_llama_server():
    defaults = model_defaults({"temperature": 0.2, "samplers": "kt"}, METADATA)
    p = defaults.params
    assert (p.temperature, p.samplers) == (0.2, ("top_k", "temperature"))  # the entry's, over the GGUF's
    assert (p.top_k, p.top_p, p.repeat_penalty) == (20, 0.8, 1.05)  # the GGUF's
    assert (p.min_p, p.typical_p) == (0.05, 1.0)  # llama-server's
    assert {name: defaults.origins[name] for name in ("temperature", "samplers", "top_k", "min_p")} == {
        "temperature": MODELS_TOML, "samplers": MODELS_TOML, "top_k": GGUF, "min_p": LLAMA_SERVER}
    described = defaults.described()
    assert described["top_p"] == {"value": 0.8, "from": GGUF} and described["temperature"]["from"] == MODELS_TOML


@pytest.mark.parametrize("key, value, message", [
    ("general.sampling.top_p", "1.500000", "general.sampling.top_p: top_p must satisfy 0 <= top_p <= 1"),
    ("general.sampling.top_k", "many", "general.sampling.top_k: top_k must be an integer"),
    ("general.sampling.sequence", "top_k;typical;temperature", "general.sampling.sequence: samplers holds 'typical'"),
])
def test_a_bad_gguf_value_names_its_key_and_the_override(key, value, message):
    with pytest.raises(WorkerError, match=r"models\.toml entry's sampling table overrides") as refused:
        model_defaults({}, {key: value})
    assert message in str(refused.value)


def test_an_entry_that_sets_the_field_stands_in_for_a_bad_gguf_value():
    defaults = model_defaults({"top_p": 0.9}, {"general.sampling.top_p": "1.500000", "general.sampling.top_k": "5"})
    assert (defaults.params.top_p, defaults.params.top_k) == (0.9, 5)
