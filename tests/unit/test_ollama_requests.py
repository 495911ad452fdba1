"""Ollama's request bodies read without a worker: options onto sampling, the refusals each name their option, a
history's tool calls given ids that its tool results answer, generate's fields."""

from __future__ import annotations

import json

import pytest

from worker.api.ollama.options import read_options
from worker.api.ollama.request import Model, parse_chat, parse_generate
from worker.api.problems import InvalidRequest, Reader
from worker.engine import SamplingParams
from worker.settings import MediaSettings

MODEL = Model(n_ctx_seq=2048, defaults=SamplingParams(temperature=0.7), thinks=False,
              media=MediaSettings())


def options(raw: dict) -> tuple:
    r = Reader({"options": raw})
    read = read_options(r, SamplingParams(temperature=0.7), 2048)
    return read, [(p.field, p.constraint) for p in r.problems]


def test_options_set_sampling_length_stop_and_context():
    read, problems = options({"temperature": 0, "top_k": 5, "typical_p": 0.5, "seed": -1, "num_predict": -1,
                              "stop": "\n", "num_ctx": 512, "repeat_last_n": 32, "num_keep": 4, "mirostat": 2,
                              "mirostat_tau": 4, "mirostat_eta": 0.2})
    assert problems == []
    assert (read.sampling.temperature, read.sampling.top_k, read.sampling.typical_p) == (0, 5, 0.5)
    assert (read.sampling.mirostat, read.sampling.mirostat_tau, read.sampling.mirostat_eta) == (2, 4, 0.2)
    assert read.sampling.seed is None and read.sampling.repeat_last_n == 32  # seed -1: a fresh one each request
    assert (read.max_tokens, read.stop, read.num_ctx) == (None, ("\n",), 512)
    assert options({"num_predict": 7})[0].max_tokens == 7 and options({})[0].sampling.temperature == 0.7


def test_each_refused_option_is_named():
    _, problems = options({"num_gpu": 1, "mirostat": 3, "tfs_z": 0.9, "nonsense": True, "num_ctx": 4096,
                           "num_predict": 0, "top_p": 2})
    assert [field for field, _ in problems] == ["options.top_p", "options.mirostat", "options.num_predict",
                                                "options.num_ctx", "options.num_gpu", "options.tfs_z",
                                                "options.nonsense"]
    assert ("options.num_ctx", "num_ctx <= 2048") in problems


def test_a_history_gets_call_ids_its_results_answer_by_tool_name():
    parsed = parse_chat({"model": "m:latest", "messages": [
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_time", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_time", "content": "noon"},
        {"role": "tool", "content": "sunny"}]}, MODEL)
    assert parsed.chat.model == "m" and parsed.chat.generation.stream and not parsed.loads_only
    assistant, time_result, weather_result = parsed.chat.messages[1:]
    calls = assistant["tool_calls"]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("call_0", "get_weather", {"city": "Paris"}), ("call_1", "get_time", {"city": "Paris"})]
    assert (time_result["tool_call_id"], weather_result["tool_call_id"]) == ("call_1", "call_0")


def test_bad_chat_fields_are_all_listed():
    with pytest.raises(InvalidRequest) as refused:
        parse_chat({"messages": [{"role": "robot", "content": "hi"}, {"role": "user", "content": 5},
                                 {"role": "assistant", "tool_calls": [{"function": {"name": ""}}]}],
                    "think": "maybe", "format": "yaml", "stream": "yes", "keep_alive": "later",
                    "top_logprobs": 3}, MODEL)
    assert [p.field for p in refused.value.problems] == [
        "format", "think", "stream", "top_logprobs", "keep_alive", "messages[0].role", "messages[1].content",
        "messages[2].tool_calls[0]"]


def test_generate_with_a_system_prompt_is_a_two_message_chat_and_empty_loads():
    parsed = parse_generate({"prompt": "Hi", "system": "Be brief.", "options": {"num_predict": 3}}, MODEL)
    assert parsed.chat.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert parsed.chat.generation.max_tokens == 3 and not parsed.raw
    assert parse_generate({"model": "m", "keep_alive": 0}, MODEL).loads_only
    assert parse_generate({"prompt": "x", "raw": True, "keep_alive": "1h30m"}, MODEL).raw


@pytest.mark.parametrize("think, budget", [(None, None), (False, None)])
def test_think_false_on_a_model_that_does_not_think_is_no_budget(think, budget):
    assert parse_chat({"messages": [], "think": think}, MODEL).chat.generation.sampling.reasoning_budget == budget


def test_typical_p_below_one_adds_llama_cpps_typical_stage():
    import llama_cpp

    from worker.engine.output.sampler import build_chain

    stages = []
    for typical_p in (1.0, 0.5):
        chain = build_chain(SamplingParams(typical_p=typical_p), None, 100, seed=1).native
        # The last stage is the draw, whose name comes from a Python callback: only llama.cpp's own are named.
        stages.append([llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain, i)).decode()
                       for i in range(llama_cpp.llama_sampler_chain_n(chain) - 1)])
        llama_cpp.llama_sampler_free(chain)
    assert [stage for stage in stages[1] if stage not in stages[0]] == ["typical"]
