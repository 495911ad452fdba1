"""Anthropic's Messages API in /openapi.json: /v1/messages and /v1/messages/count_tokens."""

from __future__ import annotations

from typing import Any

from worker.api.generation_fields import MAX_STOP_BYTES, MAX_STOP_STRINGS
from worker.api.openapi_parts import COUNT, TEXT, event, json_body, post, ref, sampling_fields, sse_event, stop_string
from worker.api.reasoning_budgets import ANTHROPIC_MIN_BUDGET
from worker.fields import ANTHROPIC_SAMPLING

_TEXT_BLOCKS = {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                           "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}
# Anthropic's content blocks, as requests carry them.
_TEXT_IN = {"type": "object", "required": ["type", "text"],
            "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
_TOOL_USE_IN = {"type": "object", "required": ["type", "id", "name", "input"], "properties": {
    "type": {"const": "tool_use"}, "id": {"type": "string", "minLength": 1}, "name": {"type": "string", "minLength": 1},
    "input": {"type": "object"}}}
_RESULT_IN = {"type": "object", "required": ["type", "tool_use_id"], "properties": {
    "type": {"const": "tool_result"}, "tool_use_id": {"type": "string", "minLength": 1},
    "content": {"oneOf": [{"type": "string"}, _TEXT_BLOCKS, {"type": "null"}]}, "is_error": {"type": "boolean"}}}
_THINKING_IN = {"type": "object", "required": ["type", "thinking"],
                "description": "an earlier turn's thinking: the template's reasoning_content for that message",
                "properties": {"type": {"const": "thinking"}, "thinking": {"type": "string"}}}
_REDACTED_THINKING_IN = {"type": "object", "required": ["type"], "description": "no text to show: left out",
                         "properties": {"type": {"const": "redacted_thinking"}}}


def _blocks(*kinds: dict) -> dict:
    return {"type": "array", "items": {"oneOf": list(kinds)}}


SCHEMAS: dict[str, Any] = {
    "MessagesRequest": {"type": "object", "required": ["messages", "max_tokens"], "properties": {
        "model": {"type": "string"},
        "lora": {"oneOf": [{"type": "null"}, ref("LoraList")]},
        "system": {"oneOf": [{"type": "string"}, _TEXT_BLOCKS, {"type": "null"}]},
        "messages": {"type": "array", "minItems": 1, "items": {"oneOf": [
            {"type": "object", "required": ["role", "content"], "properties": {
                "role": {"const": "user"}, "content": {"oneOf": [{"type": "string"}, _blocks(_TEXT_IN, _RESULT_IN)]}}},
            {"type": "object", "required": ["role", "content"], "properties": {
                "role": {"const": "assistant"},
                "content": {"oneOf": [{"type": "string"},
                                      _blocks(_TEXT_IN, _TOOL_USE_IN, _THINKING_IN, _REDACTED_THINKING_IN)]}}}]},
            "description": "a final assistant message with text or thinking is continued (prefill); an empty one, "
                           "or one that calls tools, is a turn of its own"},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
        "stop_sequences": {"type": ["array", "null"], "maxItems": MAX_STOP_STRINGS,
                           "items": stop_string(MAX_STOP_BYTES)},
        **sampling_fields(ANTHROPIC_SAMPLING),
        "tools": {"type": ["array", "null"], "items": {"type": "object", "required": ["name", "input_schema"],
                                                       "properties": {
            "type": {"const": "custom", "description": "only custom tools"},
            "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
            "description": {"type": "string"},
            "input_schema": {"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}},
                             "description": "a JSON schema of the input; for a forced call, one the grammar "
                                            "converter supports in full"}}}},
        "tool_choice": {"type": ["object", "null"], "required": ["type"], "properties": {
            "type": {"enum": ["auto", "any", "tool", "none"]},
            "name": {"type": "string", "description": "with type tool: a tool in tools"},
            "disable_parallel_tool_use": {"type": ["boolean", "null"]}}},
        "metadata": {"type": ["object", "null"]},
        "stream": {"type": ["boolean", "null"]},
        "thinking": {"oneOf": [
            {"type": "null"},
            {"type": "object", "required": ["type", "budget_tokens"], "properties": {
                "type": {"const": "enabled"},
                "budget_tokens": {"type": "integer", "minimum": ANTHROPIC_MIN_BUDGET, "maximum": 2**31 - 1,
                                  "description": "below max_tokens; the model must think"}}},
            {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["disabled", "adaptive"]}}}]},
        "output_config": {"type": ["object", "null"], "properties": {"format": {"oneOf": [
            {"type": "null"},
            {"type": "object", "required": ["type", "schema"], "properties": {
                "type": {"const": "json_schema"},
                "schema": {"type": "object", "description": "a JSON schema the grammar converter supports; not "
                                                            "beside a forced tool use"}}}]}}},
    }},
    "AnthropicError": {"type": "object", "required": ["type", "error"], "properties": {
        "type": {"const": "error"},
        "error": {"type": "object", "required": ["type", "message"], "properties": {
            "type": {"type": "string"}, "code": {"type": "string"}, "message": {"type": "string"},
            "errors": {"type": "array", "description": "each problem apart, as on the OpenAI routes"}}}}},
}
# count_tokens reads a Messages request up to its prompt: max_tokens is not needed.
SCHEMAS["CountTokensRequest"] = {**SCHEMAS["MessagesRequest"], "required": ["messages"]}


_TEXT_BLOCK = event("text", {"text": TEXT})
_THINKING_BLOCK = event("thinking", {"thinking": TEXT, "signature": TEXT})
_TOOL_USE_BLOCK = event("tool_use", {"id": {"type": "string", "pattern": "^toolu_"}, "name": TEXT,
                                      "input": {"type": "object"}})
_BLOCK = {"oneOf": [_TEXT_BLOCK, _THINKING_BLOCK, _TOOL_USE_BLOCK]}
_ANTHROPIC_USAGE = {"type": "object", "required": ["input_tokens", "output_tokens"],
                    "properties": {"input_tokens": COUNT, "output_tokens": COUNT,
                                   "cache_read_input_tokens": COUNT}}
_ANTHROPIC_ENDING = {"stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", None]},
                     "stop_sequence": {"type": ["string", "null"]}}
_ANTHROPIC_MESSAGE = event("message", {"id": TEXT, "role": {"const": "assistant"}, "model": TEXT,
                                        "content": {"type": "array", "items": _BLOCK},
                                        **_ANTHROPIC_ENDING, "usage": _ANTHROPIC_USAGE})
_BLOCK_DELTA = {"oneOf": [event("text_delta", {"text": TEXT}), event("thinking_delta", {"thinking": TEXT}),
                          event("input_json_delta", {"partial_json": TEXT})]}
# Each event's data; its `event:` line repeats the data's type. A failure mid-stream ends with an error event.
_ANTHROPIC_EVENT = {"oneOf": [
    event("message_start", {"message": _ANTHROPIC_MESSAGE}),
    event("content_block_start", {"index": COUNT, "content_block": _BLOCK}),
    event("ping", {}),
    event("content_block_delta", {"index": COUNT, "delta": _BLOCK_DELTA}),
    event("content_block_stop", {"index": COUNT}),
    event("message_delta", {"delta": {"type": "object", "required": list(_ANTHROPIC_ENDING),
                                       "properties": _ANTHROPIC_ENDING}, "usage": _ANTHROPIC_USAGE}),
    event("message_stop", {}),
    SCHEMAS["AnthropicError"],
]}
_MESSAGES = {"description": "a message, or Anthropic's named events when stream is true",
             "content": {"application/json": {"schema": _ANTHROPIC_MESSAGE},
                         "text/event-stream": {"schema": sse_event(_ANTHROPIC_EVENT)}}}


PATHS: dict[str, dict] = {
    "/v1/messages": post("Anthropic Messages API (text, tool_use and tool_result blocks)", "MessagesRequest",
                         _MESSAGES, "AnthropicError"),
    "/v1/messages/count_tokens": post("Anthropic token counting: the input tokens /v1/messages would read",
                                       "CountTokensRequest", {"description": "the count", **json_body({
                                           "type": "object", "required": ["input_tokens"],
                                           "properties": {"input_tokens": COUNT}})}, "AnthropicError"),
}
