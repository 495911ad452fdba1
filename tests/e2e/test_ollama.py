"""Ollama's API on the real model, through the unmodified `ollama` client: chat and generate answer as the OpenAI
routes do (streamed and not, with tools), embeddings are /v1/embeddings' vectors, the model routes describe the
served GGUF, Copilot's four calls answer as it expects, and bad options are a 400 naming each."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import ollama
import openai
import pytest

from tests.conftest import WorkerProcess, template_worker
from tests.gguf_files import read_gguf
from tests.helpers import WHOLE_DISTRIBUTION
from tests.tools_helpers import HISTORY, QWEN_TEMPLATE, SCHEMAS, TOOLS

MODEL = "smollm2-135m-instruct"
CONVERSATION = [{"role": "system", "content": "You are a terse assistant."},
                {"role": "user", "content": "Name a fruit."},
                {"role": "assistant", "content": "Apple."},
                {"role": "user", "content": "Tell me a story about it. 🍎"}]
GREEDY = {"temperature": 0, "num_predict": 48}
# At this seed the model opens a call by itself, drawn from the whole distribution (tests/e2e/test_tools.py's CALL_ME):
# Ollama has no tool_choice, so the call comes through tool_choice auto's lazy grammar.
CALL_ME = [{"role": "user", "content": "Call get_weather for Paris in celsius."}]
SAMPLED = {"temperature": 0.8, **WHOLE_DISTRIBUTION, "seed": 29, "num_predict": 80}
# TOOLS as Ollama's client sends them: its Tool model keeps a property's type, description, enum and items only.
SENT_TOOLS = [ollama.Tool.model_validate(tool).model_dump(exclude_none=True) for tool in TOOLS]
# HISTORY (OpenAI's form) as Ollama's clients send it: arguments as an object, the result named by its tool.
OLLAMA_HISTORY = [HISTORY[0],
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
                  {"role": "tool", "tool_name": "get_weather", "content": HISTORY[2]["content"]}]


def openai_chat(url: str, model: str, messages: list[dict], **fields):
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
    return client.chat.completions.create(model=model, messages=messages, **fields)


@pytest.fixture(scope="module")
def hermes(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> WorkerProcess:
    """The test model on Qwen 2.5's template (Hermes' tool calls), with embeddings too."""
    worker = template_worker(tmp_path_factory.mktemp("ollama"), model_path, "hermes", QWEN_TEMPLATE,
                             "--parallel", "2", "--embeddings")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def test_chat_answers_as_openai_chat_does_streamed_and_not(base_url):
    expected = openai_chat(base_url, MODEL, CONVERSATION, temperature=0, max_tokens=48)
    client = ollama.Client(host=base_url)
    whole = client.chat(model=MODEL, messages=CONVERSATION, options=GREEDY)
    assert whole.message.role == "assistant" and whole.message.content == expected.choices[0].message.content
    assert whole.done and whole.done_reason == expected.choices[0].finish_reason
    assert whole.prompt_eval_count == expected.usage.prompt_tokens
    assert whole.eval_count == expected.usage.completion_tokens
    assert whole.total_duration >= whole.eval_duration > 0 and whole.prompt_eval_duration > 0
    chunks = list(client.chat(model=MODEL + ":latest", messages=CONVERSATION, options=GREEDY, stream=True))
    assert len(chunks) > 2 and [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "".join(c.message.content for c in chunks) == whole.message.content
    assert chunks[-1].done_reason == whole.done_reason and chunks[-1].eval_count == whole.eval_count


def test_generate_is_a_one_turn_chat_and_raw_a_completion(base_url):
    client = ollama.Client(host=base_url)
    answer = client.generate(model=MODEL, prompt="Name a fruit.", system="You are a terse assistant.",
                             options=GREEDY)
    chat = openai_chat(base_url, MODEL, CONVERSATION[:2], temperature=0, max_tokens=48).choices[0].message
    assert answer.response == chat.content and answer.done_reason in ("stop", "length")
    raw = "The capital of France is"
    streamed = "".join(c.response for c in client.generate(model=MODEL, prompt=raw, raw=True, options=GREEDY,
                                                            stream=True))
    completion = openai.OpenAI(base_url=base_url + "/v1", api_key="unused").completions.create(
        model=MODEL, prompt=raw, temperature=0, max_tokens=48)
    assert streamed == completion.choices[0].text and streamed


def _calls(message) -> list[tuple[str, dict]]:
    return [(call.function.name, dict(call.function.arguments)) for call in message.tool_calls or []]


def test_a_tool_call_is_the_chat_routes_streamed_and_not(hermes):
    expected = openai_chat(hermes.url, "hermes", CALL_ME, tools=SENT_TOOLS, temperature=0.8,
                           extra_body=WHOLE_DISTRIBUTION, seed=29, max_tokens=80)
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in expected.choices[0].message.tool_calls]
    assert calls and calls[0][0] == "get_weather"
    client = ollama.Client(host=hermes.url)
    whole = client.chat(model="hermes", messages=CALL_ME, tools=TOOLS, options=SAMPLED)
    assert _calls(whole.message) == calls and whole.done_reason == "stop"
    assert whole.message.content == (expected.choices[0].message.content or "")
    for name, arguments in calls:
        assert set(arguments) <= set(SCHEMAS[name]["properties"])
    chunks = list(client.chat(model="hermes", messages=CALL_ME, tools=TOOLS, options=SAMPLED, stream=True))
    assert [call for chunk in chunks for call in _calls(chunk.message)] == calls


def test_a_history_of_calls_and_results_answers_as_chat_does(hermes):
    expected = openai_chat(hermes.url, "hermes", HISTORY, tools=SENT_TOOLS, temperature=0, max_tokens=48).choices[0]
    answer = ollama.Client(host=hermes.url).chat(model="hermes", messages=OLLAMA_HISTORY, tools=TOOLS,
                                                 options=GREEDY)
    assert answer.message.content == (expected.message.content or "")
    assert _calls(answer.message) == [(c.function.name, json.loads(c.function.arguments))
                                      for c in expected.message.tool_calls or []]


def test_embed_and_embeddings_are_the_v1_vectors(hermes):
    texts = ["The cat is sleeping on the sofa.", "Paris is the capital of France."]
    expected = openai.OpenAI(base_url=hermes.url + "/v1", api_key="unused").embeddings.create(
        model="hermes", input=texts)
    client = ollama.Client(host=hermes.url)
    embedded = client.embed(model="hermes", input=texts)
    assert embedded.embeddings == [item.embedding for item in expected.data]
    assert embedded.prompt_eval_count == expected.usage.prompt_tokens
    assert client.embeddings(model="hermes", prompt=texts[1]).embedding == expected.data[1].embedding
    assert client.embed(model="hermes", input=[]).embeddings == []


def test_the_model_routes_describe_the_served_gguf(base_url, model_path):
    client = ollama.Client(host=base_url)
    [listed] = client.list().models
    assert listed.model == MODEL and listed.size == model_path.stat().st_size and len(listed.digest) == 64
    assert (listed.details.format, listed.details.family, listed.details.quantization_level) == (
        "gguf", "llama", "Q4_1")
    shown = client.show(MODEL)
    arch = read_gguf(model_path).fields["general.architecture"]
    assert bytes(arch.parts[-1]).decode() == "llama"
    # A request here holds 2048 tokens (the shared worker: 8192 over 4 slots): what a client may send.
    assert shown.modelinfo["llama.context_length"] == 2048 and shown.modelinfo["general.parameter_count"] > 1e8
    # The model's own template shows no tools (llama.cpp finds none in it): no tools capability.
    assert shown.capabilities == ["completion"] and "{%" in shown.template
    [loaded] = client.ps().models
    assert loaded.model == MODEL and loaded.context_length == 2048


async def test_copilots_four_calls_answer_as_it_expects(http, base_url):
    """Copilot's Ollama provider: the version (0.6.4 or later), the models, each one's capabilities and context
    length, then OpenAI chat with the name it found."""
    async with http.get(base_url + "/api/version") as response:
        version = tuple(int(part) for part in (await response.json())["version"].split("."))
    assert version >= (0, 6, 4)
    async with http.get(base_url + "/api/tags") as response:
        [entry] = (await response.json())["models"]
    async with http.post(base_url + "/api/show", json={"model": entry["name"]}) as response:
        shown = await response.json()
    arch = shown["model_info"]["general.architecture"]
    assert "completion" in shown["capabilities"] and shown["model_info"][f"{arch}.context_length"] == 2048
    answer = openai_chat(base_url, entry["name"], CONVERSATION[1:2], temperature=0, max_tokens=4)
    assert answer.choices[0].message.content


async def test_bad_options_are_a_400_naming_each(http, base_url):
    options = {"num_thread": 4, "mirostat": 3, "bogus": 1, "temperature": 5, "num_ctx": 999999, "num_predict": 0}
    async with http.post(base_url + "/api/chat", json={"model": MODEL, "messages": CONVERSATION,
                                                       "options": options, "keep_alive": "soon"}) as response:
        assert response.status == 400
        body = await response.json()
    fields = {problem["field"] for problem in body["errors"]}
    assert fields == {f"options.{name}" for name in options} | {"keep_alive"}
    assert "num_thread" in body["error"] and "--ctx-size" in body["error"]
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=base_url).chat(model=MODEL, messages=CONVERSATION, options={"tfs_z": 0.5})
    assert refused.value.status_code == 400 and "tfs_z" in refused.value.error


async def test_num_ctx_bounds_prompt_and_answer(http, base_url):
    client = ollama.Client(host=base_url)
    prompt = client.chat(model=MODEL, messages=CONVERSATION, options={"num_predict": 1}).prompt_eval_count
    bounded = client.chat(model=MODEL, messages=CONVERSATION, options={"temperature": 0, "num_ctx": prompt + 3})
    assert bounded.eval_count == 3 and bounded.done_reason == "length"
    async with http.post(base_url + "/api/chat", json={"messages": CONVERSATION,
                                                       "options": {"num_ctx": prompt}}) as response:
        assert response.status == 400
        assert (await response.json())["code"] == "context_length_exceeded"


async def test_a_one_model_worker_loads_pulls_and_refuses_as_documented(http, base_url):
    client = ollama.Client(host=base_url)
    assert client.chat(model=MODEL, messages=[], keep_alive="5m").done_reason == "load"
    assert client.generate(model=MODEL, prompt="", keep_alive=-1).done_reason == "load"
    assert client.pull(MODEL).status == "success"
    with pytest.raises(ollama.ResponseError) as missing:
        client.pull("llama3.2")
    assert missing.value.status_code == 404 and MODEL in missing.value.error
    with pytest.raises(ollama.ResponseError) as deleted:
        client.delete(MODEL)
    assert deleted.value.status_code == 400 and "llm-worker serve --model" in deleted.value.error
    async with http.post(base_url + "/api/chat", json={"messages": CONVERSATION, "think": True}) as response:
        assert response.status == 400 and "does not think" in (await response.json())["error"]


async def test_refused_generate_fields_and_mid_request_shape(http, base_url):
    body = {"model": MODEL, "prompt": "Hi", "suffix": "end", "template": "{{ .Prompt }}", "context": [1, 2],
            "raw": True, "system": "Be brief.", "stream": False}
    async with http.post(base_url + "/api/generate", json=body) as response:
        assert response.status == 400
        fields = {problem["field"] for problem in (await response.json())["errors"]}
    assert fields == {"suffix", "template", "context", "raw"}
    async with aiohttp.ClientSession() as session, session.post(base_url + "/api/generate", json={
            "model": "other", "prompt": "Hi"}) as response:
        assert response.status == 404 and "is not served here" in (await response.json())["error"]
