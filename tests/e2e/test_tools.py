"""Tool calling on the real model, as llama-server reads it: the test model served with Qwen 2.5's template (Hermes'
format) and Qwen3-Coder's (XML parameters), both as llama.cpp ships them; on the model's own template (no tools) a
request with tools is a 400. Arguments are checked from outside with jsonschema. Without a worker:
tests/model/test_chat_templates.py (every template llama.cpp ships), tests/model/test_lazy_grammar.py (the grammars)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import aiohttp
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.chat_templates import template
from tests.conftest import template_worker
from tests.helpers import WHOLE_DISTRIBUTION
from tests.tools_helpers import ASK, HISTORY, OPENS_A_CALL, QWEN_TEMPLATE, SCHEMAS, TOOLS

GREEDY = {"temperature": 0, "max_tokens": 120}
FORCED = {"messages": [*ASK, OPENS_A_CALL], "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False,
          **GREEDY}


@pytest.fixture(scope="module")
def qwen_worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = template_worker(tmp_path_factory.mktemp("qwen"), model_path, "qwen", QWEN_TEMPLATE, "--parallel", "2")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


@pytest.fixture(scope="module")
def coder_worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = template_worker(tmp_path_factory.mktemp("coder"), model_path, "coder", template("Qwen3-Coder"))
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


@pytest.fixture
def client(qwen_worker) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=qwen_worker.url + "/v1", api_key="unused", max_retries=0)


def _checked(calls) -> list[tuple[str, str]]:
    """Each call is well-formed and its arguments validate against its function's parameters."""
    assert calls, "no tool call"
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return [(call.function.name, call.function.arguments) for call in calls]


async def _streamed(client: openai.AsyncOpenAI, body: dict) -> tuple[str | None, list[tuple[str, str]], str | None]:
    """A streamed answer put together as a client does: content, calls (name, arguments), finish_reason."""
    calls: dict[int, dict] = {}
    content, finish = "", None
    async for chunk in await client.chat.completions.create(model="qwen", **body, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                if delta.index not in calls:  # a call opens with its id, type and name, arguments still empty
                    assert delta.id.startswith("call_") and delta.type == "function" and delta.function.name
                    assert delta.function.arguments == ""
                    calls[delta.index] = {"name": delta.function.name, "arguments": ""}
                calls[delta.index]["arguments"] += delta.function.arguments or ""
    return content or None, [(c["name"], c["arguments"]) for c in calls.values()], finish


async def test_required_returns_calls_whose_arguments_validate(client):
    """A forced call's grammar holds its arguments to the function's schema. As llama.cpp builds it for this format,
    it lets calls follow one another (parallel_tool_calls false or not): an answer cut short by max_tokens keeps the
    calls written whole and says length."""
    choice = (await client.chat.completions.create(model="qwen", **FORCED)).choices[0]
    _checked(choice.message.tool_calls)
    assert choice.message.content is None
    assert choice.finish_reason in ("tool_calls", "length")


async def test_a_named_function_is_the_one_called(client):
    response = await client.chat.completions.create(
        model="qwen", **{**FORCED, "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert {name for name, _ in _checked(response.choices[0].message.tool_calls)} == {"get_time"}


async def test_the_streamed_calls_reassemble_to_the_whole_ones(client):
    whole = (await client.chat.completions.create(model="qwen", **FORCED)).choices[0]
    content, calls, finish = await _streamed(client, FORCED)
    assert (content, calls, finish) == (None, _checked(whole.message.tool_calls), whole.finish_reason)


class Address(BaseModel):
    city: str = Field(max_length=20)
    country: Literal["FR", "DE", "IT"]


class Parcel(BaseModel):
    to: Address
    express: bool


async def test_arguments_of_a_pydantic_schema_with_references_validate(client):
    schema = Parcel.model_json_schema()
    assert "$defs" in schema  # the nested model is a reference
    tools = [{"type": "function", "function": {"name": "ship", "parameters": schema}}]
    response = await client.chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": "Send a parcel to Rome, express."}, OPENS_A_CALL],
        tools=tools, tool_choice="required", parallel_tool_calls=False, **GREEDY)
    for call in response.choices[0].message.tool_calls:
        assert call.function.name == "ship"
        Parcel.model_validate_json(call.function.arguments)
        jsonschema.validate(json.loads(call.function.arguments), schema)


async def test_a_history_with_a_call_and_its_result_renders_as_the_template_shows_them(client, qwen_worker, http):
    async with http.post(qwen_worker.url + "/apply-template", json={"messages": HISTORY, "tools": TOOLS}) as response:
        prompt = (await response.json())["prompt"]
    assert '"name": "get_time"' in prompt  # the tools, as the template lists them
    assert HERMES_CALL in prompt
    assert '<tool_response>\n{"temperature": 21, "sky": "sunny"}\n</tool_response>' in prompt
    async with http.post(qwen_worker.url + "/tokenize", json={"content": prompt, "add_special": True}) as response:
        tokens = (await response.json())["tokens"]
    answer = await client.chat.completions.create(model="qwen", messages=HISTORY, tools=TOOLS, **GREEDY)
    assert answer.usage.prompt_tokens == len(tokens)
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")


# The text of a call in each template's own format, which a request's own grammar makes the model write: the answer is
# read for calls as any answer is (a grammar beside tools with tool_choice auto constrains the whole answer).
HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
XML_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n"
            "</parameter>\n</function>\n</tool_call>")


def _writes(text: str) -> str:
    return "root ::= " + json.dumps(text)


@pytest.mark.parametrize("worker_name, written", [("qwen_worker", HERMES_CALL), ("coder_worker", XML_CALL)],
                         ids=["hermes", "xml"])
async def test_a_call_in_the_templates_own_format_is_a_tool_call(request, worker_name, written):
    worker = request.getfixturevalue(worker_name)
    client = openai.AsyncOpenAI(base_url=worker.url + "/v1", api_key="unused", max_retries=0)
    body = {"messages": ASK, "tools": TOOLS, "extra_body": {"grammar": _writes(written)}, **GREEDY}
    model = (await client.models.list()).data[0].id
    whole = (await client.chat.completions.create(model=model, **body)).choices[0]
    [(name, arguments)] = _checked(whole.message.tool_calls)
    assert (name, json.loads(arguments)) == ("get_weather", {"city": "Paris", "unit": "celsius"})
    assert whole.message.content is None and whole.finish_reason == "tool_calls"
    streamed = [chunk async for chunk in await client.chat.completions.create(model=model, **body, stream=True)]
    arguments = "".join(call.function.arguments or "" for chunk in streamed for choice in chunk.choices
                        for call in choice.delta.tool_calls or [])
    assert arguments == whole.message.tool_calls[0].function.arguments


async def test_tool_choice_none_shows_the_tools_and_reads_no_calls(client):
    """As llama-server: the tools are in the prompt, and a call the answer writes stays its text."""
    plain = await client.chat.completions.create(model="qwen", messages=ASK, **GREEDY)
    none = await client.chat.completions.create(
        model="qwen", messages=ASK, tools=TOOLS, tool_choice="none", extra_body={"grammar": _writes(HERMES_CALL)},
        **GREEDY)
    assert none.usage.prompt_tokens > plain.usage.prompt_tokens
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content == HERMES_CALL


# tool_choice auto through the API (tests/model/test_lazy_grammar.py: on the sampler alone): at this seed the model
# opens a call by itself, drawn from the whole distribution (no top-k, top-p or min-p, which the model's defaults
# would add). Without the grammar (tool_choice none, the same prompt) that call comes out as the tool's description
# with the schema spilled into it, cut at max_tokens; under the lazy grammar its arguments validate.
CALL_ME = {"messages": [{"role": "user", "content": "Call get_weather for Paris in celsius."}], "tools": TOOLS,
           "temperature": 0.8, "extra_body": WHOLE_DISTRIBUTION, "seed": 29, "max_tokens": 80,
           "parallel_tool_calls": False}


async def test_auto_a_call_the_model_opens_validates(client):
    free = (await client.chat.completions.create(model="qwen", **CALL_ME, tool_choice="none")).choices[0]
    assert free.message.content.startswith("<tool_call>") and free.finish_reason == "length"
    choice = (await client.chat.completions.create(model="qwen", **CALL_ME)).choices[0]
    assert [name for name, _ in _checked(choice.message.tool_calls)] == ["get_weather"]
    assert choice.finish_reason == "tool_calls"


async def test_auto_streamed_equals_whole(client):
    whole = (await client.chat.completions.create(model="qwen", **CALL_ME)).choices[0]
    assert await _streamed(client, CALL_ME) == (whole.message.content, _checked(whole.message.tool_calls),
                                                 whole.finish_reason)


# uniqueItems is refused by the grammar converter
UNIQUE = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
BAD = [
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]},
     "tools[0].function.parameters"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_news"}}},
     "tool_choice.function.name"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": UNIQUE}}], "tool_choice": "required"},
     "tools[0].function.parameters.properties.tags.uniqueItems"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"parallel_tool_calls": "yes", "tools": TOOLS}, "parallel_tool_calls"),
    ({"messages": [*ASK, {"role": "tool", "content": "21 degrees"}]}, "messages[1].tool_call_id"),
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "get_weather", "arguments": {"city": "Paris"}}}]}]}, "messages[1].tool_calls[0].function.arguments"),
    ({"messages": [*ASK, {"role": "assistant", "content": "A"}, {"role": "assistant", "content": "B"}]}, "messages"),
    ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking"),
    ({"reasoning_format": "verbose"}, "reasoning_format"),
    ({"functions": [{"name": "get_weather"}]}, "functions"),
]


@pytest.mark.parametrize("extra, field", BAD, ids=[field for _, field in BAD])
async def test_bad_tools_are_400_naming_the_field(qwen_worker, extra, field):
    body = {"messages": ASK, "max_tokens": 4, **extra}
    async with aiohttp.ClientSession() as http, http.post(qwen_worker.url + "/v1/chat/completions",
                                                          json=body) as response:
        assert response.status == 400, await response.text()
        error = (await response.json())["error"]
    assert field in [problem["field"] for problem in error["errors"]], error


async def test_a_template_that_shows_no_tools_refuses_them(base_url, http):
    """The default model's own template never shows tools or calls: a request that offers them is a 400, where
    llama-server would answer as if none were offered; with tool_choice none they change nothing."""
    async with http.post(base_url + "/v1/chat/completions", json={"messages": ASK, "tools": TOOLS,
                                                                 "max_tokens": 4}) as response:
        assert response.status == 400
        [problem] = (await response.json())["error"]["errors"]
    assert problem["field"] == "tools" and "chat_template" in problem["message"]
    none = {"messages": ASK, "tools": TOOLS, "tool_choice": "none", "max_tokens": 4, "temperature": 0}
    async with http.post(base_url + "/v1/chat/completions", json=none) as response:
        assert response.status == 200


async def test_auto_with_a_schema_no_grammar_honors_answers(qwen_worker, http):
    """UNIQUE is a 400 for a forced call (see BAD); under auto the calls are then read as written."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": UNIQUE}}]
    async with http.post(qwen_worker.url + "/v1/chat/completions",
                         json={"messages": ASK, "tools": tools, "max_tokens": 4}) as response:
        assert response.status == 200, await response.text()
