"""Structured output on the real model: response_format, grammar and json_schema, through llama.cpp's grammar.

Outputs are checked from outside: json.loads (strict: no raw control characters) and the jsonschema package.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.helpers import completion_text, execute, openai_once, openai_stream

CHAT = "/v1/chat/completions"
YES_NO = 'root ::= "yes" | "no"'


def _object(properties: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties) if required is None else required,
            "additionalProperties": False}


def _text(n: int) -> dict:
    return {"type": "string", "maxLength": n}


ADDRESS = _object({"street": _text(24), "zip": {"type": "string", "pattern": "^[0-9]{5}$"}})
# (what to ask for, the schema): nested objects, arrays with bounds, enums, required and optional fields,
# numbers, patterns and formats, references, unions and tuples.
SCHEMAS = {
    "flat": ("a person", _object({"name": _text(20), "age": {"type": "integer"}})),
    "enum_boolean": ("an account", _object({"status": {"enum": ["active", "inactive", "banned"]},
                                            "verified": {"type": "boolean"}})),
    "nested": ("a user record", _object({"user": _object({"id": {"type": "integer"}, "email": _text(30)}),
                                         "active": {"type": "boolean"}})),
    "string_array": ("a blog post's tags", _object({"tags": {"type": "array", "items": _text(10),
                                                             "minItems": 1, "maxItems": 3}})),
    "object_array": ("a shopping list", _object({"items": {
        "type": "array", "items": _object({"name": _text(12), "qty": {"type": "integer"}}),
        "minItems": 1, "maxItems": 2}})),
    "optional": ("a book", _object({"title": _text(30), "year": {"type": "integer"}, "subtitle": _text(20)},
                                   required=["title"])),
    "number": ("a price", _object({"amount": {"type": "number"}, "currency": {"enum": ["USD", "EUR", "GBP"]}})),
    "pattern": ("a flight", _object({"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3,4}$"},
                                     "gate": {"type": "string", "pattern": "^[A-F][1-9]$"}})),
    "date": ("a birthday", _object({"name": _text(16), "born": {"type": "string", "format": "date"}})),
    "uuid_datetime": ("an event", _object({"id": {"type": "string", "format": "uuid"},
                                           "at": {"type": "string", "format": "date-time"}})),
    "const": ("a report header", _object({"version": {"const": 2}, "kind": {"const": "report"},
                                          "title": _text(20)})),
    "nullable": ("a user's nickname", _object({"nickname": {"anyOf": [_text(10), {"type": "null"}]}})),
    "type_list": ("a measurement", _object({"value": {"type": ["integer", "null"]}, "unit": {"enum": ["m", "s"]}})),
    "refs": ("two addresses", {**_object({"home": {"$ref": "#/$defs/address"}, "work": {"$ref": "#/$defs/address"}}),
                               "$defs": {"address": ADDRESS}}),
    "top_array": ("a few lottery numbers", {"type": "array", "items": {"type": "integer"}, "minItems": 2,
                                            "maxItems": 4}),
    "top_enum": ("a primary colour", {"enum": ["red", "green", "blue"]}),
    "tuple": ("a name, an age and a flag", {"type": "array", "prefixItems": [_text(10), {"type": "integer"},
                                                                             {"type": "boolean"}], "items": False,
                                            "minItems": 3, "maxItems": 3}),
    "matrix": ("a small matrix", _object({"rows": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
        "type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}}})),
    "lengths": ("a word", _object({"word": {"type": "string", "minLength": 3, "maxLength": 8}})),
    "one_of": ("a shape", _object({"shape": {"oneOf": [
        _object({"kind": {"const": "circle"}, "radius": {"type": "integer"}}),
        _object({"kind": {"const": "square"}, "side": {"type": "integer"}})]}})),
    "integer_bounds": ("a guest, a dice roll and a basement floor", _object({
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "roll": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 7},
        "floor": {"type": "integer", "maximum": -1}, "visits": {"type": "integer", "minimum": 105}})),
}


def _chat(prompt: str, **fields) -> dict:
    return {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 160, **fields}


def _json_schema(schema: dict, name: str = "answer") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


async def _both(http, base_url: str, route: str, body: dict) -> list[tuple[str, str]]:
    """(text, finish_reason) of the request sent whole and streamed, side by side."""
    whole, streamed = await asyncio.gather(openai_once(http, base_url + route, body),
                                           openai_stream(http, base_url + route, body))
    return [(completion_text(whole), whole["choices"][0]["finish_reason"]), (streamed.text, streamed.finish_reason)]


@pytest.mark.parametrize("name", SCHEMAS)
async def test_json_schema_output_validates(http, base_url, name):
    what, schema = SCHEMAS[name]
    body = _chat(f"Give me {what} as JSON.", response_format=_json_schema(schema, name))
    for text, finish in await _both(http, base_url, CHAT, body):
        assert finish == "stop", text  # the grammar completed and the model could only end
        jsonschema.validate(json.loads(text), schema)


async def test_integer_bounds_hold_when_sampling(http, base_url):
    """Drawn at temperature 1: with the same fields unbounded, every one of these draws left the ranges
    (balance always came out positive, and age reached 1000166)."""
    schema = _object({"age": {"type": "integer", "minimum": 18, "maximum": 99},
                      "siblings": {"type": "integer", "minimum": 0, "exclusiveMaximum": 12},
                      "balance": {"type": "integer", "minimum": -500, "maximum": -20}})
    for seed in range(8):  # one at a time: each within the client's timeout on a busy machine
        body = _chat("Give me a person as JSON.", temperature=1.0, seed=seed, response_format=_json_schema(schema))
        result = await openai_once(http, base_url + CHAT, body)
        text = completion_text(result)
        assert result["choices"][0]["finish_reason"] == "stop", text
        jsonschema.validate(json.loads(text), schema)


async def test_json_schema_on_completions(http, base_url):
    _, schema = SCHEMAS["nested"]
    body = {"prompt": "A user record in JSON:", "temperature": 0, "max_tokens": 160, "grammar": "",
            "response_format": _json_schema(schema)}
    for text, finish in await _both(http, base_url, "/v1/completions", body):
        assert finish == "stop"
        jsonschema.validate(json.loads(text), schema)


async def test_enum_strings_that_need_escaping_come_back_exact(http, base_url):
    choices = ['say "hi"', "C:\\temp", "two\nlines", "tab\there"]
    schema = _object({"pick": {"enum": choices}})
    body = _chat("Pick one.", response_format=_json_schema(schema))
    for text, finish in await _both(http, base_url, CHAT, body):
        assert finish == "stop" and json.loads(text)["pick"] in choices


async def test_json_object_is_one_object(http, base_url):
    body = _chat('Reply with a JSON object with the keys "city" and "country" for Paris.',
                 response_format={"type": "json_object"})
    for text, finish in await _both(http, base_url, CHAT, body):
        assert finish == "stop" and isinstance(json.loads(text), dict), text


async def test_text_response_format_changes_nothing(http, base_url):
    body = _chat("Say hello.", max_tokens=16)
    plain = await openai_once(http, base_url + CHAT, body)
    text = await openai_once(http, base_url + CHAT, {**body, "response_format": {"type": "text"}})
    assert completion_text(text) == completion_text(plain)


async def test_greedy_with_a_schema_repeats_exactly(http, base_url):
    """The grammar only masks tokens: greedy stays deterministic, and the prefix cache changes nothing."""
    _, schema = SCHEMAS["object_array"]
    body = _chat("Give me a shopping list as JSON.", response_format=_json_schema(schema))
    first = await openai_once(http, base_url + CHAT, body)
    second = await openai_once(http, base_url + CHAT, body)
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert completion_text(first) == completion_text(second)


@pytest.mark.parametrize("route,payload", [
    (CHAT, {"messages": [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]}),
    ("/v1/completions", {"prompt": "Q: Is the sky blue? Answer yes or no.\nA:"}),
])
async def test_grammar_constrains_and_ends_with_stop(http, base_url, route, payload):
    body = {**payload, "grammar": YES_NO, "max_tokens": 20, "temperature": 0.9, "seed": 11, "top_k": 40,
            "repeat_penalty": 1.1}  # every stage of the chain, drawing under the grammar
    for text, finish in await _both(http, base_url, route, body):
        assert text in ("yes", "no") and finish == "stop"


async def test_execute_grammar_and_json_schema(http, base_url):
    job = {"prompt": "Is the sky blue? Answer yes or no.", "max_tokens": 20}
    events = await execute(http, base_url, {**job, "job_id": "grammar", "grammar": YES_NO})
    assert "".join(e["t"] for e in events if e != "[DONE]" and e["type"] == "token") in ("yes", "no")
    assert events[-2]["stop_reason"] == "EOS"
    _, schema = SCHEMAS["enum_boolean"]
    events = await execute(http, base_url, {"prompt": "An account as JSON:", "max_tokens": 60, "temperature": 0,
                                            "job_id": "schema", "json_schema": schema})
    jsonschema.validate(json.loads("".join(e["t"] for e in events if e != "[DONE]" and e["type"] == "token")),
                        schema)
    assert events[-2]["stop_reason"] == "EOS"


class Address(BaseModel):
    city: str = Field(max_length=20)
    country: str = Field(max_length=20)


class Person(BaseModel):
    name: str = Field(max_length=20)
    age: int
    role: Literal["admin", "user"]
    address: Address
    nickname: str | None = Field(max_length=12)


def test_openai_sdk_parse_returns_the_model(base_url):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused")
    completion = client.chat.completions.parse(
        model="smollm2-135m-instruct", response_format=Person, temperature=0, max_tokens=200,
        messages=[{"role": "user", "content": "Describe a person who lives in Paris, as JSON."}])
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Person)
    assert choice.message.parsed.role in ("admin", "user")


class Booking(BaseModel):
    guests: int = Field(ge=1, le=8)
    nights: int = Field(gt=0, lt=31)
    floor: int = Field(ge=-2, le=40)


def test_openai_sdk_parse_with_integer_bounds(base_url):
    """pydantic writes ge/le/gt/lt as minimum/maximum/exclusiveMinimum/exclusiveMaximum; parse validates them."""
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused")
    for seed in range(3):
        completion = client.chat.completions.parse(
            model="smollm2-135m-instruct", response_format=Booking, temperature=1.0, seed=seed, max_tokens=100,
            messages=[{"role": "user", "content": "Book a hotel stay, as JSON."}])
        choice = completion.choices[0]
        assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Booking)


async def _refused(http, url: str, body: dict) -> dict:
    async with http.post(url, json=body) as response:
        assert response.status == 400, await response.text()
        return await response.json()


def _openai_fields(body: dict) -> set[str]:
    return {p["field"] for p in body["error"]["errors"]}


@pytest.mark.parametrize("route", [CHAT, "/v1/completions"])
@pytest.mark.parametrize("grammar,why", [
    ('root ::= "yes" | [', "unexpected end of input"),
    ('answer ::= "yes"', "does not contain a 'root' symbol"),
    ("root ::= root \"a\"", "left recursion"),
    ("root ::= undefined", "Undefined rule identifier 'undefined'"),
    ('root ::= "\\q"', "unknown escape"),
    ('root ::= "a\0"', "NUL"),
    (7, "must be a string"),
])
async def test_bad_grammar_is_a_400_naming_it(http, base_url, route, grammar, why):
    payload = {"messages": [{"role": "user", "content": "Hi"}]} if route == CHAT else {"prompt": "Hi"}
    body = await _refused(http, base_url + route, {**payload, "grammar": grammar, "max_tokens": 4})
    assert body["error"]["param"] == "grammar" and why in body["error"]["message"]


async def test_execute_bad_grammar_and_schema_are_400s(http, base_url):
    job = {"job_id": "bad", "prompt": "Hi", "max_tokens": 4}
    body = await _refused(http, base_url + "/execute", {**job, "grammar": 'root ::= "a'})
    assert [e["field"] for e in body["errors"]] == ["grammar"]
    body = await _refused(http, base_url + "/execute", {**job, "json_schema": {"type": "number", "maximum": 9}})
    assert [e["field"] for e in body["errors"]] == ["json_schema.maximum"]
    body = await _refused(http, base_url + "/execute", {**job, "grammar": YES_NO, "json_schema": {"type": "string"}})
    assert [e["field"] for e in body["errors"]] == ["json_schema"]


@pytest.mark.parametrize("response_format,field", [
    ({"type": "xml"}, "response_format.type"),
    ("json", "response_format"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": 5, "schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "strin"}}}, "response_format.json_schema.schema.type"),
])
async def test_bad_response_format_is_a_400_naming_it(http, base_url, response_format, field):
    body = await _refused(http, base_url + CHAT, _chat("Hi", response_format=response_format))
    assert _openai_fields(body) == {field}


async def test_grammar_and_response_format_together_are_refused(http, base_url):
    body = await _refused(http, base_url + CHAT, _chat("Hi", grammar=YES_NO, response_format={"type": "json_object"}))
    assert _openai_fields(body) == {"response_format"}


async def test_every_unsupported_keyword_is_listed(http, base_url):
    schema = _object({
        "height": {"type": "number", "minimum": 0, "maximum": 3},
        "step": {"type": "integer", "multipleOf": 5},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "code": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4},
        "meta": {"type": "object", "patternProperties": {"^x-": {}}},
        "other": {"not": {"type": "null"}},
    })
    body = await _refused(http, base_url + CHAT, _chat("Hi", response_format=_json_schema(schema)))
    prefix = "response_format.json_schema.schema.properties."
    assert _openai_fields(body) == {prefix + f for f in (
        "height.minimum", "height.maximum", "step.multipleOf", "email.format", "tags.uniqueItems", "code.maxLength",
        "meta.patternProperties", "other.not")}


async def test_a_grammar_that_allows_no_token_fails_cleanly(http, base_url):
    """No token can spell a NUL character: the request fails with a message; the worker serves on."""
    async with http.post(base_url + "/v1/completions",
                         json={"prompt": "Hi", "max_tokens": 8, "grammar": 'root ::= "a" "\\x00"'}) as response:
        assert response.status == 500
        assert "the grammar allows no token" in (await response.json())["error"]["message"]
    body = {"prompt": "Hi", "max_tokens": 4, "grammar": YES_NO}
    assert completion_text(await openai_once(http, base_url + "/v1/completions", body)) in ("yes", "no")
