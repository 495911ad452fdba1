"""Tool calling on the real model: with a Hermes-style template that lists tools itself, and with the model's
own template (no tool support: the generic fallback). Arguments are checked from outside with jsonschema. Without a
worker: tests/unit/test_tool_prompt.py (the prompts), tests/model/test_lazy_grammar.py (tool_choice auto's grammar)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import aiohttp
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.conftest import template_worker
from tests.helpers import WHOLE_DISTRIBUTION
from tests.tools_helpers import ASK, HERMES_TEMPLATE, HISTORY, SCHEMAS, TOOLS

GREEDY = {"temperature": 0, "max_tokens": 120}


@pytest.fixture(scope="module")
def hermes_worker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = template_worker(tmp_path_factory.mktemp("hermes"), model_path, "hermes", HERMES_TEMPLATE,
                             "--parallel", "2")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


@pytest.fixture(params=["hermes", "own_template"])
async def chat(request, hermes_worker, worker):
    """(client, model id) on the Hermes-template worker, then on the shared worker with the model's own template."""
    served = hermes_worker if request.param == "hermes" else worker
    client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
    model = (await client.models.list()).data[0].id
    return client, model


def _checked(calls) -> list[tuple[str, str]]:
    """Each call is well-formed and its arguments validate against its function's parameters."""
    assert calls, "no tool call"
    for call in calls:
        assert call.id.startswith("call_") and call.type == "function"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return [(call.function.name, call.function.arguments) for call in calls]


async def test_required_returns_a_call_whose_arguments_validate(chat):
    client, model = chat
    response = await client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
                                                     parallel_tool_calls=False, **GREEDY)
    choice = response.choices[0]
    assert len(_checked(choice.message.tool_calls)) == 1
    assert choice.finish_reason == "tool_calls" and choice.message.content is None


async def test_a_named_function_is_the_one_called(chat):
    client, model = chat
    response = await client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}},
        **GREEDY)
    assert {name for name, _ in _checked(response.choices[0].message.tool_calls)} == {"get_time"}


async def test_the_streamed_call_reassembles_to_the_whole_one(chat):
    client, model = chat
    body = dict(model=model, messages=ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, **GREEDY)
    whole = (await client.chat.completions.create(**body)).choices[0]
    calls: dict[int, dict] = {}
    content, finish = "", None
    async for chunk in await client.chat.completions.create(**body, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                if delta.index not in calls:  # a call opens with its id, type and name, arguments still empty
                    assert delta.id.startswith("call_") and delta.type == "function" and delta.function.name
                    assert delta.function.arguments == ""
                    calls[delta.index] = {"name": delta.function.name, "arguments": ""}
                calls[delta.index]["arguments"] += delta.function.arguments or ""
    assert [(c["name"], c["arguments"]) for c in calls.values()] == _checked(whole.message.tool_calls)
    assert (content, finish) == ("", whole.finish_reason) == ("", "tool_calls")


class Address(BaseModel):
    city: str = Field(max_length=20)
    country: Literal["FR", "DE", "IT"]


class Parcel(BaseModel):
    to: Address
    express: bool


async def test_arguments_of_a_pydantic_schema_with_references_validate(chat):
    client, model = chat
    schema = Parcel.model_json_schema()
    assert "$defs" in schema  # the nested model is a reference
    tools = [{"type": "function", "function": {"name": "ship", "parameters": schema}}]
    response = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Send a parcel to Rome, express."}], tools=tools,
        tool_choice="required", parallel_tool_calls=False, **GREEDY)
    [call] = response.choices[0].message.tool_calls
    assert call.function.name == "ship"
    Parcel.model_validate_json(call.function.arguments)
    jsonschema.validate(json.loads(call.function.arguments), schema)


async def test_a_history_with_a_tool_result_renders_and_answers(chat):
    client, model = chat
    response = await client.chat.completions.create(model=model, messages=HISTORY, tools=TOOLS, **GREEDY)
    choice = response.choices[0]
    assert choice.message.content or choice.message.tool_calls
    assert choice.finish_reason == ("tool_calls" if choice.message.tool_calls else choice.finish_reason)
    assert choice.finish_reason in ("stop", "length", "tool_calls")


async def test_tool_choice_none_answers_in_text(chat):
    client, model = chat
    plain = await client.chat.completions.create(model=model, messages=ASK, **GREEDY)
    none = await client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="none", **GREEDY)
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == plain.choices[0].message.content  # the tools are left out


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
    ({"functions": [{"name": "get_weather"}]}, "functions"),
]


@pytest.mark.parametrize("extra, field", BAD, ids=[field for _, field in BAD])
async def test_bad_tools_are_400_naming_the_field(base_url, extra, field):
    body = {"messages": ASK, "max_tokens": 4, **extra}
    async with aiohttp.ClientSession() as http, http.post(base_url + "/v1/chat/completions", json=body) as response:
        assert response.status == 400, await response.text()
        error = (await response.json())["error"]
    assert field in [problem["field"] for problem in error["errors"]], error


# tool_choice auto through the API (tests/model/test_lazy_grammar.py: on the sampler alone): on the Hermes template,
# this seed makes the model open a call by itself, drawn from the whole distribution (no top-k, top-p or min-p, which
# the model's defaults would add). Sampled freely that call came out as {"celsius": 35.7, "fahrenheit": 86.7}
# (missing city and unit) followed by text; under the lazy grammar its arguments validate.
CALL_ME = {"messages": [{"role": "user", "content": "Call get_weather for Paris in celsius."}], "tools": TOOLS,
           "temperature": 0.8, "extra_body": WHOLE_DISTRIBUTION, "seed": 3, "max_tokens": 80,
           "parallel_tool_calls": False}


async def test_auto_a_call_the_model_opens_validates(hermes_worker):
    client = openai.AsyncOpenAI(base_url=hermes_worker.url + "/v1", api_key="unused", max_retries=0)
    model = (await client.models.list()).data[0].id
    choice = (await client.chat.completions.create(model=model, **CALL_ME)).choices[0]
    assert [name for name, _ in _checked(choice.message.tool_calls)] == ["get_weather"]
    assert choice.finish_reason == "tool_calls"


async def test_auto_streamed_equals_whole(hermes_worker):
    client = openai.AsyncOpenAI(base_url=hermes_worker.url + "/v1", api_key="unused", max_retries=0)
    model = (await client.models.list()).data[0].id
    whole = (await client.chat.completions.create(model=model, **CALL_ME)).choices[0]
    calls: dict[int, dict] = {}
    content, finish = "", None
    async for chunk in await client.chat.completions.create(model=model, **CALL_ME, stream=True):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"name": delta.function.name, "arguments": ""})
                call["arguments"] += delta.function.arguments or ""
    assert [(c["name"], c["arguments"]) for c in calls.values()] == _checked(whole.message.tool_calls)
    assert (content or None, finish) == (whole.message.content, whole.finish_reason)


async def test_auto_with_a_schema_no_grammar_honors_answers(base_url, http):
    """UNIQUE is a 400 for a forced call (see BAD); under auto the calls are then read as written, as before."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": UNIQUE}}]
    async with http.post(base_url + "/v1/chat/completions",
                         json={"messages": ASK, "tools": tools, "max_tokens": 4}) as response:
        assert response.status == 200, await response.text()
