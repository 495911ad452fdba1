"""The pieces every dialect's part of /openapi.json is written with: request and response bodies, server-sent
events, the sampling fields from their table (worker/fields.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worker.api.model_sampling import LLAMA_SERVER_DEFAULTS
from worker.api.structured import MAX_GRAMMAR_CHARS
from worker.fields import SAMPLER_LETTERS, SAMPLER_NAMES, Field, NumberField, OrderField, TextsField


def stop_string(max_bytes: int) -> dict:
    # JSON Schema counts characters; the limit is in UTF-8 bytes, so only ASCII reaches maxLength.
    return {"type": "string", "minLength": 1, "maxLength": max_bytes, "description": f"at most {max_bytes} UTF-8 bytes"}


GRAMMAR = {"type": ["string", "null"], "maxLength": MAX_GRAMMAR_CHARS, "format": "gbnf",
            "description": "a llama.cpp GBNF grammar (root rule: root) the output must match; empty for none"}


PER_MODEL_DEFAULT = ("default: the models.toml entry's sampling value, else the GGUF's general.sampling key, else "
                     "llama-server's (the default shown)")


def field_schema(field: Field) -> dict:
    """A sampling field's schema, from its row in worker/fields.py; its default is llama-server's (a model's own
    come before it: api/model_sampling.py)."""
    schema = _SCHEMAS[type(field)](field)
    default = getattr(LLAMA_SERVER_DEFAULTS, field.sets)
    if default is not None:
        schema["default"] = list(default) if isinstance(default, tuple) else default
    if field.per_model:
        schema["description"] = PER_MODEL_DEFAULT
    return schema


def _number(field: NumberField) -> dict:
    kind = "integer" if field.integer else "number"
    schema: dict[str, Any] = {"type": [kind, "null"] if field.nullable else kind}
    if field.low is not None:
        schema["minimum"] = field.low
    if field.high is not None:
        schema["maximum"] = field.high
    return schema


def _any_case(name: str) -> str:
    return "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in name)


def _order(field: OrderField) -> dict:
    """A list of names (in any case, as llama.cpp lowercases them) or a string of letters."""
    names = {"type": "string", "pattern": f"^({'|'.join(map(_any_case, SAMPLER_NAMES))})$"}
    letters = {"type": "string", "maxLength": field.max_items, "pattern": f"^[{''.join(SAMPLER_LETTERS.values())}]*$"}
    return {"oneOf": [{"type": "array", "maxItems": field.max_items, "items": names}, letters, {"type": "null"}]}


def _texts(field: TextsField) -> dict:
    return {"type": ["array", "null"], "minItems": 1, "maxItems": field.max_items,
            "items": stop_string(field.max_bytes)}


_SCHEMAS: dict[type, Callable[[Any], dict]] = {NumberField: _number, OrderField: _order, TextsField: _texts}


def sampling_fields(fields: tuple[Field, ...]) -> dict[str, dict]:
    return {field.name: field_schema(field) for field in fields}


PROMPT = {"type": "string", "minLength": 1}


def lora_list(n_adapters: int | None) -> dict:
    """A `lora` list ([{id, scale}]): ids of the worker's adapters (none without --lora), scales llama.cpp's floats
    hold; `n_adapters` None: not known yet (the model is loading)."""
    ids: dict[str, Any] = {"type": "integer", "minimum": 0, "description": "an adapter of GET /lora-adapters"}
    if n_adapters:
        ids["maximum"] = n_adapters - 1
    entry = {"type": "object", "required": ["id", "scale"], "additionalProperties": False, "properties": {
        "id": ids, "scale": {"type": "number", "minimum": -3.4e38, "maximum": 3.4e38}}}
    schema: dict[str, Any] = {"type": "array", "items": entry, "description": "each id once"}
    if n_adapters == 0:
        schema["maxItems"] = 0
    return schema


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def json_body(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


def sse_event(payload: dict) -> dict:
    """One server-sent event whose data is a JSON `payload`, or the closing `data: [DONE]`.

    Before OpenAPI 3.2's itemSchema, a text/event-stream schema describes each event as an object
    {data, event, id, retry} (as schemathesis checks streams); contentSchema is the JSON inside data.
    """
    return {"type": "object", "required": ["data"], "properties": {"data": {
        "type": "string", "if": {"const": "[DONE]"},
        "else": {"contentMediaType": "application/json", "contentSchema": payload},
    }}}


def sse(description: str, payload: dict) -> dict:
    return {"description": description, "content": {"text/event-stream": {"schema": sse_event(payload)}}}


def post(summary: str, body: str, ok: dict, error: str) -> dict:
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True, **json_body(ref(body))},
        "responses": {"200": ok, "400": {"description": "every problem, listed", **json_body(ref(error))},
                      "401": {"description": "missing or invalid API key"},
                      "404": {"description": "the model named is not the one served (model_not_found)"},
                      "413": {"description": "body over the size limit", **json_body(ref(error))},
                      "503": {"description": "loading, draining or queue full (Retry-After)"}},
    }}


def get(summary: str, response: dict) -> dict:
    return {"get": {"summary": summary, "responses": {"200": response}}}


COUNT = {"type": "integer", "minimum": 0}
TEXT = {"type": "string"}


def event(kind: str, fields: dict, optional: dict | None = None) -> dict:
    """A JSON event {"type": kind, ...fields}, as /execute streams them."""
    return {"type": "object", "required": ["type", *fields],
            "properties": {"type": {"const": kind}, **fields, **(optional or {})}}
