"""OpenAI's Responses API in /openapi.json: /v1/responses and stored responses."""

from __future__ import annotations

from typing import Any

from worker.api.openai.schema import CHAT_ONLY, FORCED_CALL
from worker.api.openapi_parts import COUNT, TEXT, json_body, post, ref, sampling_fields, sse_event
from worker.api.reasoning_budgets import EFFORT_BUDGETS
from worker.fields import OPENAI_SAMPLING

_TEXT_PARTS = {"type": "array", "items": {"type": "object", "required": ["type", "text"], "properties": {
    "type": {"enum": ["input_text", "output_text", "text"]}, "text": {"type": "string"}}}}
_ITEM_TEXT = {"oneOf": [{"type": "string"}, _TEXT_PARTS]}
_RESPONSES_ITEM = {"oneOf": [
    {"type": "object", "required": ["role", "content"], "properties": {
        "type": {"const": "message"}, "role": {"enum": ["user", "system", "developer", "assistant"]},
        "content": _ITEM_TEXT}},
    {"type": "object", "required": ["type", "call_id", "name", "arguments"], "properties": {
        "type": {"const": "function_call"}, "call_id": {"type": "string", "minLength": 1},
        "name": {"type": "string", "minLength": 1}, "arguments": {"type": "string"}}},
    {"type": "object", "required": ["type", "call_id", "output"], "properties": {
        "type": {"const": "function_call_output"}, "call_id": {"type": "string", "minLength": 1},
        "output": _ITEM_TEXT}},
    {"type": "object", "required": ["type"], "description": "an earlier turn's reasoning: left out",
     "properties": {"type": {"const": "reasoning"}}},
]}
SCHEMAS: dict[str, Any] = {"ResponsesRequest": {
    "type": "object", "required": ["input"], "examples": [{"input": "Hi", "max_output_tokens": 8, "stream": True}],
    "properties": {
        "model": {"type": "string"},
        "lora": {"oneOf": [{"type": "null"}, ref("LoraList")]},
        "input": {"oneOf": [{"type": "string"}, {
            "type": "array", "minItems": 1, "items": _RESPONSES_ITEM, "description": "not only reasoning items",
            "contains": {"not": {"type": "object", "required": ["type"],
                                 "properties": {"type": {"const": "reasoning"}}}}}]},
        "instructions": {"type": ["string", "null"], "description": "a system message first; not carried over"},
        "previous_response_id": {"type": ["string", "null"], "description": "a stored response's id"},
        "store": {"type": ["boolean", "null"], "default": True},
        "stream": {"type": ["boolean", "null"]},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
        **sampling_fields(OPENAI_SAMPLING),
        "tools": {"type": ["array", "null"], "items": {"type": "object", "required": ["type", "name"], "properties": {
            "type": {"const": "function", "description": "only function tools"},
            "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}, "description": {"type": "string"},
            "parameters": CHAT_ONLY["tools"]["items"]["properties"]["function"]["properties"]["parameters"],
            "strict": {"type": ["boolean", "null"]}}}},
        "tool_choice": {"oneOf": [{"enum": ["none", "auto", "required", None]}, {
            "type": "object", "required": ["type", "name"],
            "properties": {"type": {"const": "function"}, "name": {"type": "string"}}}]},
        "parallel_tool_calls": CHAT_ONLY["parallel_tool_calls"],
        "text": {"type": ["object", "null"], "properties": {"format": {"oneOf": [
            {"type": "null"},
            {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
            {"type": "object", "required": ["type", "schema"], "properties": {
                "type": {"const": "json_schema"}, "name": {"type": "string"}, "schema": {"type": "object"},
                "strict": {"type": ["boolean", "null"]}}}]}}},
        "reasoning": {"type": ["object", "null"], "properties": {
            "effort": {"enum": [*EFFORT_BUDGETS, None]}}},
        "metadata": {"type": ["object", "null"]},
        "user": {"type": ["string", "null"]},
        "truncation": {"enum": ["disabled", None]},
    },
    "anyOf": FORCED_CALL,
}}


_RESPONSE_OBJECT = {"type": "object", "required": ["id", "object", "status", "output"], "properties": {
    "id": {"type": "string", "pattern": "^resp_"}, "object": {"const": "response"},
    "status": {"enum": ["in_progress", "completed", "incomplete", "failed"]}, "output": {"type": "array"}}}
_RESPONSE_EVENT = {"oneOf": [
    {"type": "object", "required": ["type", "sequence_number"], "properties": {
        "type": {"type": "string", "pattern": "^response\\."}, "sequence_number": COUNT}},
]}
_RESPONSE = {"description": "a response object, or the Responses API's named events when stream is true",
             "content": {"application/json": {"schema": _RESPONSE_OBJECT},
                         "text/event-stream": {"schema": sse_event(_RESPONSE_EVENT)}}}


def _stored_response() -> dict:
    parameters = [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    missing = {"description": "no stored response has this id", **json_body(ref("OpenAIError"))}
    return {
        "get": {"summary": "A stored response", "parameters": parameters,
                "responses": {"200": {"description": "the response object", **json_body(_RESPONSE_OBJECT)},
                              "404": missing}},
        "delete": {"summary": "Forget a stored response", "parameters": parameters,
                   "responses": {"200": {"description": "deleted", **json_body({
                       "type": "object", "required": ["id", "deleted"],
                       "properties": {"id": TEXT, "object": {"const": "response.deleted"},
                                      "deleted": {"const": True}}})}, "404": missing}},
    }


PATHS: dict[str, dict] = {
    "/v1/responses": post("OpenAI Responses API (a chat turn; stored responses kept in memory)", "ResponsesRequest",
                           _RESPONSE, "OpenAIError"),
    "/v1/responses/{response_id}": _stored_response(),
}
