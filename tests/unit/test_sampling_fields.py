"""The sampling fields as requests send them, read by their table (worker/fields.py): llama-server's names and limits,
the samplers' order by llama.cpp's names, aliases or letters, and every problem in one 400."""

from __future__ import annotations

import pytest

from worker.api.openai.request import parse_chat, parse_completion
from worker.api.problems import InvalidRequest
from worker.engine import SamplingParams
from worker.fields import DEFAULT_SAMPLERS, SAMPLER_NAMES

CHAT = {"messages": [{"role": "user", "content": "Hi"}]}


def sampling(**fields) -> SamplingParams:
    return parse_completion({"prompt": "x", **fields}, 100).generation.sampling


def problems(**fields) -> dict[str, str]:
    with pytest.raises(InvalidRequest) as refused:
        sampling(**fields)
    return {p.field: p.message for p in refused.value.problems}


def test_llama_servers_sampling_fields_set_the_chain():
    read = sampling(dry_multiplier=0.8, dry_base=1.5, dry_allowed_length=3, dry_penalty_last_n=128,
                    dry_sequence_breakers=["\n", "###"], xtc_probability=0.5, xtc_threshold=0.2, top_n_sigma=1.5,
                    mirostat=2, mirostat_tau=4.0, mirostat_eta=0.2, dynatemp_range=0.3, dynatemp_exponent=2,
                    min_keep=2, typical_p=0.9)
    assert (read.dry_multiplier, read.dry_base, read.dry_allowed_length, read.dry_penalty_last_n) == (0.8, 1.5, 3, 128)
    assert read.dry_sequence_breakers == ("\n", "###")
    assert (read.xtc_probability, read.xtc_threshold, read.top_n_sigma) == (0.5, 0.2, 1.5)
    assert (read.mirostat, read.mirostat_tau, read.mirostat_eta) == (2, 4.0, 0.2)
    assert (read.dynatemp_range, read.dynatemp_exponent, read.min_keep, read.typical_p) == (0.3, 2, 2, 0.9)


def test_fields_left_out_keep_the_models_defaults():
    defaults = SamplingParams(temperature=0.2, top_k=40, mirostat=2, samplers=("top_k", "temperature"))
    read = parse_chat({**CHAT, "top_k": 5}, 100, defaults).generation.sampling
    assert (read.temperature, read.top_k, read.mirostat, read.samplers) == (0.2, 5, 2, ("top_k", "temperature"))


@pytest.mark.parametrize("sent, order", [
    (["top_k", "top_p", "temperature"], ("top_k", "top_p", "temperature")),
    (["Top-K", "nucleus", "TEMP", "typ", "minp", "top-n-sigma"], ("top_k", "top_p", "temperature", "typ_p", "min_p",
                                                                  "top_n_sigma")),
    ("kpt", ("top_k", "top_p", "temperature")),
    ("edskyptmx", ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "temperature", "min_p", "xtc")),
    ([], ()),
    (None, DEFAULT_SAMPLERS),
])
def test_samplers_take_llama_cpps_names_aliases_and_letters(sent, order):
    assert sampling(samplers=sent).samplers == order


def test_every_alias_is_read_as_llama_cpp_reads_it():
    assert {SAMPLER_NAMES[alias] for alias in ("typ-p", "typp", "top-p", "topp", "top-n-sigma", "topnsigma", "min-p",
                                               "minp", "top-k", "topk")} == {"typ_p", "top_p", "top_n_sigma", "min_p",
                                                                             "top_k"}


def test_every_bad_sampling_field_is_named_in_one_400():
    found = problems(samplers=["top_k", "infill", "bogus"], dry_sequence_breakers=[], dry_base=0.5, mirostat=3,
                     xtc_probability=1.5, dry_penalty_last_n=5000, top_n_sigma="wide")
    assert set(found) == {"samplers", "dry_sequence_breakers", "dry_base", "mirostat", "xtc_probability",
                          "dry_penalty_last_n", "top_n_sigma"}
    assert "'infill', 'bogus'" in found["samplers"] and "penalties, dry, top_n_sigma" in found["samplers"]


@pytest.mark.parametrize("sent, why", [
    ("kpQ", "'Q'"),  # letters are case-sensitive, as llama.cpp's
    ("k" * 33, "has 33 samplers"),
    ([1, 2], "must be a list of sampler names or a string of their letters"),
    ({"top_k": 1}, "must be a list of sampler names or a string of their letters"),
])
def test_a_bad_samplers_value_says_why(sent, why):
    assert why in problems(samplers=sent)["samplers"]


@pytest.mark.parametrize("sent, why", [
    ("\n", "must be a list of strings"),
    (["x" * 41], "over 40 bytes"),
    ([""], "must not be empty"),
    (["\n"] * 65, "at most 64"),
])
def test_dry_sequence_breakers_are_a_list_of_short_strings(sent, why):
    assert why in problems(dry_sequence_breakers=sent)["dry_sequence_breakers"]
