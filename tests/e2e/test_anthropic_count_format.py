"""Anthropic's /v1/messages/count_tokens and output_config.format, through the unmodified anthropic SDK."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest

from tests.helpers import counts_its_input

MODEL = "smollm2-135m-instruct"
GREEDY = {"extra_body": {"temperature": 0}}
TOOLS = [{"name": "get_weather", "description": "The weather in a city now",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture
def client(base_url):
    return anthropic.Anthropic(base_url=base_url, api_key="unused", max_retries=0)


def test_count_tokens_is_the_input_the_same_request_reports(client):
    counts_its_input(client, MODEL, system="You are terse.")


def test_count_tokens_refuses_tools_as_the_request_would(client):
    """The default model's template shows no tools: counting a request with tools is refused as the request is
    (test_anthropic.py counts one on a template with tool calls)."""
    for call in (client.messages.count_tokens, client.messages.create):
        with pytest.raises(anthropic.BadRequestError) as refused:
            call(model=MODEL, messages=[{"role": "user", "content": "Hi"}], tools=TOOLS,
                 **({} if call == client.messages.count_tokens else {"max_tokens": 4}))
        assert "chat template shows the model neither tools nor tool calls" in refused.value.body["error"]["message"]


def test_output_config_format_answers_in_the_schema(client):
    ask = dict(model=MODEL, max_tokens=80, messages=[{"role": "user", "content": "Invent a person."}],
               output_config={"format": {"type": "json_schema", "schema": PERSON}}, **GREEDY)
    whole = client.messages.create(**ask)
    text = whole.content[0].text
    jsonschema.validate(json.loads(text), PERSON)
    assert whole.stop_reason == "end_turn"
    with client.messages.stream(**ask) as stream:
        assert stream.get_final_message().content[0].text == text


def test_bad_count_tokens_and_format_list_every_problem(client, base_url):
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.count_tokens(model=MODEL, messages=[], system=[{"type": "image"}])
    message = refused.value.body["error"]["message"]
    assert "messages must be a non-empty list" in message and "system[0]: image blocks" in message
    for schema, field in [(PERSON, "tool_choice"), ({"type": "integer", "multipleOf": 3},
                                                     "output_config.format.schema.multipleOf")]:
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}],
                                   output_config={"format": {"type": "json_schema", "schema": schema}},
                                   tool_choice={"type": "any"}, tools=TOOLS)
        assert [problem["field"] for problem in refused.value.body["error"]["errors"]] == [field]
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}],
                               output_config={"format": {"type": "text"}})
    assert "output_config.format: the format must be" in refused.value.body["error"]["message"]
