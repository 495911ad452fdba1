"""OpenAI's Responses API on the real model, through the unmodified openai SDK, checked against the chat route."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.e2e.test_tools import qwen_worker  # noqa: F401 (a fixture)
from tests.tools_helpers import OPENS_A_CALL, SCHEMAS, WEATHER

MODEL = "smollm2-135m-instruct"
GREEDY = {"temperature": 0}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city now", "parameters": WEATHER},
         {"type": "function", "name": "get_time", "description": "The time in a city now",
          "parameters": SCHEMAS["get_time"]}]


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def chat(client: openai.OpenAI, messages: list[dict], max_tokens: int, **extra) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=max_tokens, **GREEDY, **extra)


def test_text_is_the_chat_routes_whole_and_streamed(base_url):
    client = sdk(base_url)
    ask = dict(model=MODEL, input="Name three fruits.", instructions="You are terse.", max_output_tokens=24, **GREEDY)
    whole = client.responses.create(**ask)
    expected = chat(client, [{"role": "system", "content": "You are terse."},
                             {"role": "user", "content": "Name three fruits."}], 24)
    assert whole.output_text == expected.choices[0].message.content
    assert whole.status == ("incomplete" if expected.choices[0].finish_reason == "length" else "completed")
    assert whole.usage.input_tokens == expected.usage.prompt_tokens
    assert whole.usage.output_tokens == expected.usage.completion_tokens
    assert [item.type for item in whole.output] == ["message"] and whole.output[0].id.startswith("msg_")

    with client.responses.stream(**ask) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == whole.output_text
    assert final.status == whole.status and final.usage.output_tokens == whole.usage.output_tokens

    kinds = [event.type for event in client.responses.create(**ask, stream=True)]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[3:5] == ["response.content_part.added", "response.output_text.delta"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          f"response.{whole.status}"]


def test_a_function_call_then_its_output_then_the_answer(qwen_worker):
    client = sdk(qwen_worker.url)
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    opened = [*ask, OPENS_A_CALL]  # the answer opens a call: a final assistant message is continued
    called = client.responses.create(model="qwen", input=opened, tools=TOOLS, tool_choice="required",
                                     parallel_tool_calls=False, max_output_tokens=120, **GREEDY)
    calls = [item for item in called.output if item.type == "function_call"]
    assert calls and called.status in ("completed", "incomplete")
    call = calls[0]
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
    as_chat = client.chat.completions.create(
        model="qwen", messages=opened, max_tokens=120, tool_choice="required", parallel_tool_calls=False, **GREEDY,
        tools=[{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS])
    chat_call = as_chat.choices[0].message.tool_calls[0]
    assert (call.name, call.arguments) == (chat_call.function.name, chat_call.function.arguments)

    with client.responses.stream(model="qwen", input=opened, tools=TOOLS, tool_choice="required",
                                 parallel_tool_calls=False, max_output_tokens=120, **GREEDY) as stream:
        arguments = "".join(e.delta for e in stream if e.type == "response.function_call_arguments.delta")
        streamed = [item for item in stream.get_final_response().output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in streamed] == [(c.name, c.arguments) for c in calls]
    assert arguments == "".join(c.arguments for c in calls)

    result = '{"temperature": 21, "sky": "sunny"}'
    answered = client.responses.create(model="qwen", tools=TOOLS, max_output_tokens=40, **GREEDY, input=[
        *ask, {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": result}])
    history = [*ask, {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": result}]
    expected = client.chat.completions.create(
        model="qwen", messages=history, max_tokens=40, **GREEDY,
        tools=[{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS])
    assert answered.output_text == (expected.choices[0].message.content or "")


def test_text_format_json_schema_validates(base_url):
    client = sdk(base_url)
    answer = client.responses.create(model=MODEL, input="Invent a person.", max_output_tokens=80, **GREEDY,
                                     text={"format": {"type": "json_schema", "name": "person", "schema": PERSON,
                                                      "strict": True}})
    jsonschema.validate(json.loads(answer.output_text), PERSON)
    assert answer.text.format.type == "json_schema"


def test_previous_response_id_continues_a_stored_conversation(base_url):
    client = sdk(base_url)
    first = client.responses.create(model=MODEL, input="Tell me a one-line joke about owls.", max_output_tokens=30,
                                    **GREEDY)
    assert client.responses.retrieve(first.id).output_text == first.output_text
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="Explain it.",
                                     max_output_tokens=30, **GREEDY)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens_details.cached_tokens > 0
    expected = chat(client, [{"role": "user", "content": "Tell me a one-line joke about owls."},
                             {"role": "assistant", "content": first.output_text},
                             {"role": "user", "content": "Explain it."}], 30)
    assert second.output_text == expected.choices[0].message.content

    unstored = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, store=False)
    client.responses.delete(first.id)
    for gone in (first.id, unstored.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(gone)
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=MODEL, previous_response_id=gone, input="Go on.", max_output_tokens=4)
        assert refused.value.body["param"] == "previous_response_id" and gone in refused.value.body["message"]


async def test_bad_input_lists_every_problem_in_openais_shape(http, base_url):
    body = {"model": MODEL, "input": [{"role": "robot", "content": "x"}, {"type": "input_image"},
                                      {"type": "function_call_output", "output": "x"}],
            "max_output_tokens": 0, "truncation": "auto", "background": True, "temperature": 9,
            "tools": [{"type": "function", "name": "bad name!"}], "tool_choice": {"type": "file_search"},
            "text": {"format": {"type": "json_schema", "schema": {"type": "integer", "multipleOf": 3}}}}
    async with http.post(base_url + "/v1/responses", json=body) as response:
        answer = await response.json()
    assert response.status == 400, answer
    assert answer["error"]["type"] == "invalid_request_error"
    fields = {problem["field"] for problem in answer["error"]["errors"]}
    assert fields >= {"input[0].role", "input[1]", "input[2].call_id", "max_output_tokens", "truncation",
                      "background", "temperature", "tools[0].name", "tool_choice.type", "text.format.schema.multipleOf"}
    async with http.post(base_url + "/v1/responses", json={"input": "Hi", "model": "gpt-9"}) as response:
        assert response.status == 404 and (await response.json())["error"]["code"] == "model_not_found"
