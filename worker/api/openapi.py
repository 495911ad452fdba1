"""The OpenAPI 3.1 document of every route, served at /openapi.json (a test keeps it true)."""

from __future__ import annotations

from typing import Any

from worker import __version__
from worker.api.budgets import ANTHROPIC_MIN_BUDGET, EFFORT_BUDGETS
from worker.api.embeddings import ENCODINGS, MAX_INPUTS
from worker.api.schemas import (EXECUTE_STOP_BYTES, EXECUTE_STOP_STRINGS, MAX_COMPLETION_LOGPROBS, MAX_STOP_BYTES,
                                MAX_STOP_STRINGS, MAX_TOP_LOGPROBS, ROLES)
from worker.api.structured import MAX_GRAMMAR_CHARS
from worker.engine import SamplingParams
from worker.fields import ANTHROPIC_SAMPLING, EXECUTE_SAMPLING, OPENAI_SAMPLING, NumberField


def _stop_string(max_bytes: int) -> dict:
    # JSON Schema counts characters; the limit is in UTF-8 bytes, so only ASCII reaches maxLength.
    return {"type": "string", "minLength": 1, "maxLength": max_bytes, "description": f"at most {max_bytes} UTF-8 bytes"}


_GRAMMAR = {"type": ["string", "null"], "maxLength": MAX_GRAMMAR_CHARS, "format": "gbnf",
            "description": "a llama.cpp GBNF grammar (root rule: root) the output must match; empty for none"}
_RESPONSE_FORMAT = {"oneOf": [
    {"type": "null"},
    {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "json_schema"], "properties": {
        "type": {"const": "json_schema"},
        "json_schema": {"type": "object", "required": ["schema"], "properties": {
            "name": {"type": "string"}, "schema": {"type": "object"}, "strict": {"type": ["boolean", "null"]}}}}},
]}
def _number(field: NumberField) -> dict:
    """A sampling field's schema, from its row in worker/fields.py; its default is the engine's."""
    kind = "integer" if field.integer else "number"
    schema: dict[str, Any] = {"type": [kind, "null"] if field.nullable else kind}
    if field.low is not None:
        schema["minimum"] = field.low
    if field.high is not None:
        schema["maximum"] = field.high
    default = getattr(SamplingParams(), field.sets)
    if default is not None:
        schema["default"] = default
    if field.per_model:
        schema["description"] = "default: the models.toml entry's sampling value, if it sets one"
    return schema


def _numbers(fields: tuple[NumberField, ...]) -> dict[str, dict]:
    return {field.name: _number(field) for field in fields}


_SAMPLING = {
    **_numbers(OPENAI_SAMPLING),
    "max_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
    "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
    "stop": {"oneOf": [_stop_string(MAX_STOP_BYTES), {"type": "null"},
                       {"type": "array", "maxItems": MAX_STOP_STRINGS, "items": _stop_string(MAX_STOP_BYTES)}]},
    "logit_bias": {"type": ["object", "null"], "propertyNames": {"$ref": "#/components/schemas/TokenId"},
                   "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": ["boolean", "null"]}}},
    "model": {"type": "string"},
    "n": {"type": ["integer", "null"], "minimum": 1, "description": "at most --parallel"},
    "grammar": _GRAMMAR,
    "response_format": _RESPONSE_FORMAT,
}
_CHAT_ONLY = {
    "chat_template_kwargs": {"type": ["object", "null"], "description": "template variables, e.g. enable_thinking"},
    "logprobs": {"type": ["boolean", "null"]},
    "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_TOP_LOGPROBS},
    "tools": {"type": ["array", "null"], "items": {"type": "object", "required": ["type", "function"], "properties": {
        "type": {"const": "function", "description": "only function tools"},
        "function": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
            "description": {"type": "string"},
            "parameters": {"type": ["object", "null"], "properties": {"type": {"const": "object"}},
                           "description": "a JSON schema of the arguments object; for a forced call, one the "
                                          "grammar converter supports in full"},
            "strict": {"type": ["boolean", "null"]}}}}}},
    "tool_choice": {"enum": ["none", "auto", "required", None],
                    "description": 'or {"type": "function", "function": {"name": <a function in tools>}}: '
                                   "a call of that function"},
    "parallel_tool_calls": {"type": ["boolean", "null"], "description": "a forced answer may hold several calls"},
    "reasoning_effort": {"enum": [*EFFORT_BUDGETS, None],
                         "description": "a thinking budget (docs/agents-and-evals.md); not beside reasoning_budget"},
}
# A forced call (tool_choice required) needs tools, and samples under its own grammar: no other constraint beside it.
_FORCED_CALL = [
    {"properties": {"tool_choice": {"enum": ["none", "auto", None]}}},
    {"required": ["tools"], "properties": {
        "tools": {"type": "array", "minItems": 1}, "grammar": {"enum": ["", None]},
        "response_format": {"oneOf": [{"type": "null"},
                                      {"type": "object", "properties": {"type": {"const": "text"}}}]}}},
]
_COMPLETION_EXTRAS = {
    "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_COMPLETION_LOGPROBS,
                 "description": "with echo, the prompt's tokens get theirs too (the first: null)"},
    "echo": {"type": ["boolean", "null"], "description": "the prompt leads the text; needs n = 1"},
    "best_of": {"type": ["integer", "null"], "minimum": 1, "description": "equal to n"},
    # 0: the prompt alone (scored with echo + logprobs, or only prefilled into the prefix cache).
    "max_tokens": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**31 - 1},
    "max_completion_tokens": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**31 - 1},
    "reasoning_budget": {"type": "null", "description": "a raw prompt has no reasoning split: chat turns only"},
}
# echo repeats (and scores) the prompt once: not beside several choices.
_ECHO_ONCE = [{"properties": {"echo": {"enum": [False, None]}}},
              {"properties": {"n": {"enum": [1, None]}, "best_of": {"enum": [1, None]}}}]
_CONTENT = [
    {"type": "string"},
    {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}},
]
_TOOL_CALLS = {"type": "array", "items": {"type": "object", "required": ["function"], "properties": {
    "id": {"type": "string"}, "type": {"const": "function"},
    "function": {"type": "object", "required": ["name", "arguments"], "properties": {
        "name": {"type": "string"}, "arguments": {"type": "string", "description": "a JSON object, as text"}}}}}}
_MESSAGE = {"anyOf": [
    {"type": "object", "required": ["role", "content"],
     "properties": {"role": {"enum": [role for role in ROLES if role != "tool"]}, "content": {"oneOf": _CONTENT},
                    "tool_calls": {"oneOf": [{"type": "null"}, _TOOL_CALLS]}}},
    {"type": "object", "required": ["role", "tool_calls"], "description": "an assistant's tool calls",
     "properties": {"role": {"const": "assistant"}, "content": {"oneOf": [{"type": "null"}, *_CONTENT]},
                    "tool_calls": {**_TOOL_CALLS, "minItems": 1}}},
    {"type": "object", "required": ["role", "content", "tool_call_id"], "description": "a tool's result",
     "properties": {"role": {"const": "tool"}, "content": {"oneOf": _CONTENT},
                    "tool_call_id": {"type": "string", "minLength": 1}}},
]}
_PROMPT = {"type": "string", "minLength": 1}
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
_THINKING_IN = {"type": "object", "required": ["type"], "description": "an earlier turn's thinking: left out",
                "properties": {"type": {"enum": ["thinking", "redacted_thinking"]}}}


def _blocks(*kinds: dict) -> dict:
    return {"type": "array", "items": {"oneOf": list(kinds)}}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


_TOKEN_IDS = {"type": "array", "minItems": 1,
              "items": {"type": "integer", "minimum": 0, "description": "below the model's vocabulary size"}}
def _detokenize_request(n_vocab: int | None) -> dict:
    ids = {"type": "integer", "minimum": 0, "description": "below the model's vocabulary size"}
    if n_vocab is not None:
        ids["maximum"] = n_vocab - 1
    return {"type": "object", "required": ["tokens"], "properties": {"tokens": {"type": "array", "items": ids}}}


SCHEMAS: dict[str, Any] = {
    "TokenId": {"type": "string", "pattern": "^[0-9]+$", "description": "a token id of the served model"},
    # Each request schema's example streams: schemathesis sends examples first, so every SSE shape is checked.
    "ChatRequest": {"type": "object", "required": ["messages"], "examples": [{
                        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": True,
                        "stream_options": {"include_usage": True}}],
                    "properties": {"messages": {"type": "array", "minItems": 1, "items": _MESSAGE}, **_SAMPLING,
                                   **_CHAT_ONLY},
                    "anyOf": _FORCED_CALL},
    "CompletionRequest": {"type": "object", "required": ["prompt"], "examples": [{
                              "prompt": "Once upon a time", "max_tokens": 8, "stream": True}],
                          "properties": {"prompt": {"oneOf": [
                              _PROMPT, _ref("PromptTokenIds"),
                              {"type": "array", "minItems": 1, "maxItems": 1,
                               "items": {"oneOf": [_PROMPT, _ref("PromptTokenIds")]}}]},
                              **_SAMPLING, **_COMPLETION_EXTRAS},
                          "anyOf": _ECHO_ONCE},
    "PromptTokenIds": _TOKEN_IDS,
    "ExecuteRequest": {"type": "object", "required": ["job_id", "prompt", "max_tokens"],
                       "examples": [{"job_id": "job-1", "prompt": "Once upon a time", "max_tokens": 8}], "properties": {
        "job_id": {"type": "string", "minLength": 1},
        "prompt": {"type": "string", "minLength": 1, "maxLength": 32768},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2048},
        **_numbers(EXECUTE_SAMPLING),
        "stop": {"type": ["array", "null"], "maxItems": EXECUTE_STOP_STRINGS,
                 "items": _stop_string(EXECUTE_STOP_BYTES)},
        "grammar": _GRAMMAR,
        "json_schema": {"type": ["object", "null"], "description": "a JSON schema the output must validate against"},
    }},
    "CancelRequest": {"type": "object", "required": ["job_id"],
                      "properties": {"job_id": {"type": "string", "minLength": 1}}},
    "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "errors": {"type": "array"}}}}},
    "ContractErrors": {"type": "object", "required": ["errors"], "properties": {"errors": {"type": "array", "items": {
        "type": "object", "required": ["field", "constraint", "message"],
        "properties": {"field": {"type": "string"}, "constraint": {"type": "string"}, "message": {"type": "string"},
                       "value": {}, "code": {"type": "string"}}}}}},
    "TokenizeRequest": {"type": "object", "required": ["content"], "properties": {
        "content": {"type": "string"}, "add_special": {"type": ["boolean", "null"], "default": False},
        "parse_special": {"type": ["boolean", "null"], "default": True},
        "with_pieces": {"type": ["boolean", "null"], "default": False}}},
    "DetokenizeRequest": _detokenize_request(None),
    "MessagesRequest": {"type": "object", "required": ["messages", "max_tokens"], "properties": {
        "model": {"type": "string"},
        "system": {"oneOf": [{"type": "string"}, _TEXT_BLOCKS, {"type": "null"}]},
        "messages": {"type": "array", "minItems": 1, "items": {"oneOf": [
            {"type": "object", "required": ["role", "content"], "properties": {
                "role": {"const": "user"}, "content": {"oneOf": [{"type": "string"}, _blocks(_TEXT_IN, _RESULT_IN)]}}},
            {"type": "object", "required": ["role", "content"], "properties": {
                "role": {"const": "assistant"},
                "content": {"oneOf": [{"type": "string"}, _blocks(_TEXT_IN, _TOOL_USE_IN, _THINKING_IN)]}}}]},
            "description": "a final assistant message is continued (prefill); one that calls tools must be "
                           "followed by a user message with their results"},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
        "stop_sequences": {"type": ["array", "null"], "maxItems": MAX_STOP_STRINGS,
                           "items": _stop_string(MAX_STOP_BYTES)},
        **_numbers(ANTHROPIC_SAMPLING),
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
    "EmbeddingRequest": {"type": "object", "required": ["input"], "properties": {
        "input": {"oneOf": [_PROMPT, _ref("PromptTokenIds"), {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS,
                                                             "items": {"oneOf": [_PROMPT, _ref("PromptTokenIds")]}}]},
        "model": {"type": "string"},
        "encoding_format": {"enum": list(ENCODINGS)},
        "dimensions": {"type": "integer", "minimum": 1, "description": "the model's width: vectors are never cut"},
        "user": {"type": "string"},
    }},
}
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
SCHEMAS["ResponsesRequest"] = {
    "type": "object", "required": ["input"], "examples": [{"input": "Hi", "max_output_tokens": 8, "stream": True}],
    "properties": {
        "model": {"type": "string"},
        "input": {"oneOf": [{"type": "string"}, {
            "type": "array", "minItems": 1, "items": _RESPONSES_ITEM, "description": "not only reasoning items",
            "contains": {"not": {"type": "object", "required": ["type"],
                                 "properties": {"type": {"const": "reasoning"}}}}}]},
        "instructions": {"type": ["string", "null"], "description": "a system message first; not carried over"},
        "previous_response_id": {"type": ["string", "null"], "description": "a stored response's id"},
        "store": {"type": ["boolean", "null"], "default": True},
        "stream": {"type": ["boolean", "null"]},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
        **_numbers(OPENAI_SAMPLING),
        "tools": {"type": ["array", "null"], "items": {"type": "object", "required": ["type", "name"], "properties": {
            "type": {"const": "function", "description": "only function tools"},
            "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}, "description": {"type": "string"},
            "parameters": _CHAT_ONLY["tools"]["items"]["properties"]["function"]["properties"]["parameters"],
            "strict": {"type": ["boolean", "null"]}}}},
        "tool_choice": {"oneOf": [{"enum": ["none", "auto", "required", None]}, {
            "type": "object", "required": ["type", "name"],
            "properties": {"type": {"const": "function"}, "name": {"type": "string"}}}]},
        "parallel_tool_calls": _CHAT_ONLY["parallel_tool_calls"],
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
    "anyOf": _FORCED_CALL,
}
# count_tokens reads a Messages request up to its prompt: max_tokens is not needed.
SCHEMAS["CountTokensRequest"] = {**SCHEMAS["MessagesRequest"], "required": ["messages"]}


def _json(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


def _sse_event(payload: dict) -> dict:
    """One server-sent event whose data is a JSON `payload`, or the closing `data: [DONE]`.

    Before OpenAPI 3.2's itemSchema, a text/event-stream schema describes each event as an object
    {data, event, id, retry} (as schemathesis checks streams); contentSchema is the JSON inside data.
    """
    return {"type": "object", "required": ["data"], "properties": {"data": {
        "type": "string", "if": {"const": "[DONE]"},
        "else": {"contentMediaType": "application/json", "contentSchema": payload},
    }}}


def _sse(description: str, payload: dict) -> dict:
    return {"description": description, "content": {"text/event-stream": {"schema": _sse_event(payload)}}}


def _post(summary: str, body: str, ok: dict, error: str) -> dict:
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True, **_json(_ref(body))},
        "responses": {"200": ok, "400": {"description": "every problem, listed", **_json(_ref(error))},
                      "401": {"description": "missing or invalid API key"},
                      "404": {"description": "the model named is not the one served (model_not_found)"},
                      "413": {"description": "body over the size limit"},
                      "503": {"description": "loading, draining or queue full (Retry-After)"}},
    }}


def _get(summary: str, response: dict) -> dict:
    return {"get": {"summary": summary, "responses": {"200": response}}}


_COUNT = {"type": "integer", "minimum": 0}
_TEXT = {"type": "string"}


def _event(kind: str, fields: dict, optional: dict | None = None) -> dict:
    """A JSON event {"type": kind, ...fields}, as /execute streams them."""
    return {"type": "object", "required": ["type", *fields],
            "properties": {"type": {"const": kind}, **fields, **(optional or {})}}


_EXECUTE_EVENT = {"oneOf": [
    _event("started", {"job_id": _TEXT, "model": _TEXT, "started_at": {"type": "string", "format": "date-time"}}),
    _event("token", {"t": _TEXT, "i": _COUNT}),
    _event("metrics", {"tokens_per_sec": {"type": "number", "minimum": 0}, "vram_bytes": _COUNT}),
    _event("end", {"tokens_out": _COUNT, "prompt_tokens_cached": _COUNT, "decode_time_ms": _COUNT,
                   "stop_reason": {"enum": ["EOS", "STOP_SEQUENCE", "MAX_TOKENS", "CANCELLED"]}},
           {"stop_sequence_matched": _TEXT}),
    _event("error", {"code": {"enum": ["INFERENCE_FAILED", "TIMEOUT"]}, "message": _TEXT}),
]}
_PROGRESS_EVENT = {"type": "object", "required": ["stage", "done", "total"],
                   "properties": {"stage": _TEXT, "done": _COUNT, "total": _COUNT}}
_USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
          "properties": {"prompt_tokens": _COUNT, "completion_tokens": _COUNT, "total_tokens": _COUNT}}
_CHUNK = {"type": "object", "required": ["id", "object", "created", "model", "choices"], "properties": {
    "id": _TEXT, "object": {"enum": ["chat.completion.chunk", "text_completion"]}, "created": _COUNT, "model": _TEXT,
    "choices": {"type": "array", "items": {"type": "object", "required": ["index", "finish_reason"], "properties": {
        "index": _COUNT, "finish_reason": {"enum": ["stop", "length", "tool_calls", None]}}}},
    "usage": _USAGE,
}}
# A stream that fails after it opened ends with an error object instead of the last chunk.
_GENERATED = {"description": "a completion object, or SSE chunks ending with [DONE] when stream is true",
              "content": {"application/json": {"schema": {"type": "object"}},
                          "text/event-stream": {"schema": _sse_event({"oneOf": [_CHUNK, SCHEMAS["OpenAIError"]]})}}}
_HEALTH = {"description": "healthy", **_json({"type": "object", "properties": {
    "status": {"type": "string"}, "vram_bytes": {"type": "integer"},
    "exactness": {"type": "object", "properties": {
        "prefix_cache": {"enum": ["exact", "fast", "off"]},
        "library": {"enum": ["default", "batch-invariant", "LLAMA_CPP_LIB_PATH"]},
        "ggml_batch_invariant": {"type": "boolean"}, "flash_attn": {"enum": ["on", "off", "auto"]},
        "cache_type_k": {"type": "string"}, "cache_type_v": {"type": "string"}, "attention_pinned": {"type": "boolean"},
        "tiled_mm": {"type": "boolean"}, "repack": {"type": "boolean"},
        "decoded_cells_exact": {"type": ["boolean", "null"]}, "batch_invariant": {"type": ["boolean", "null"]},
        "moved_cells_exact": {"type": ["boolean", "null"]},
        "answers_reused": {"type": "boolean"}, "speculative": {"enum": ["none", "ngram", "draft"]},
        "drafts_keep_text": {"type": ["boolean", "null"]}}}}})}

_TEXT_BLOCK = _event("text", {"text": _TEXT})
_THINKING_BLOCK = _event("thinking", {"thinking": _TEXT, "signature": _TEXT})
_TOOL_USE_BLOCK = _event("tool_use", {"id": {"type": "string", "pattern": "^toolu_"}, "name": _TEXT,
                                      "input": {"type": "object"}})
_BLOCK = {"oneOf": [_TEXT_BLOCK, _THINKING_BLOCK, _TOOL_USE_BLOCK]}
_ANTHROPIC_USAGE = {"type": "object", "required": ["input_tokens", "output_tokens"],
                    "properties": {"input_tokens": _COUNT, "output_tokens": _COUNT,
                                   "cache_read_input_tokens": _COUNT}}
_ANTHROPIC_ENDING = {"stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", None]},
                     "stop_sequence": {"type": ["string", "null"]}}
_ANTHROPIC_MESSAGE = _event("message", {"id": _TEXT, "role": {"const": "assistant"}, "model": _TEXT,
                                        "content": {"type": "array", "items": _BLOCK},
                                        **_ANTHROPIC_ENDING, "usage": _ANTHROPIC_USAGE})
_BLOCK_DELTA = {"oneOf": [_event("text_delta", {"text": _TEXT}), _event("thinking_delta", {"thinking": _TEXT}),
                          _event("input_json_delta", {"partial_json": _TEXT})]}
# Each event's data; its `event:` line repeats the data's type. A failure mid-stream ends with an error event.
_ANTHROPIC_EVENT = {"oneOf": [
    _event("message_start", {"message": _ANTHROPIC_MESSAGE}),
    _event("content_block_start", {"index": _COUNT, "content_block": _BLOCK}),
    _event("ping", {}),
    _event("content_block_delta", {"index": _COUNT, "delta": _BLOCK_DELTA}),
    _event("content_block_stop", {"index": _COUNT}),
    _event("message_delta", {"delta": {"type": "object", "required": list(_ANTHROPIC_ENDING),
                                       "properties": _ANTHROPIC_ENDING}, "usage": _ANTHROPIC_USAGE}),
    _event("message_stop", {}),
    SCHEMAS["AnthropicError"],
]}
_MESSAGES = {"description": "a message, or Anthropic's named events when stream is true",
             "content": {"application/json": {"schema": _ANTHROPIC_MESSAGE},
                         "text/event-stream": {"schema": _sse_event(_ANTHROPIC_EVENT)}}}
_PIECE = {"oneOf": [_TEXT, {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}}]}
_TOKENS = {"description": "token ids, or with_pieces {id, piece}: the piece's text, or its bytes when not UTF-8 alone",
           **_json({"type": "object", "required": ["tokens"], "properties": {"tokens": {"type": "array", "items": {
               "oneOf": [_COUNT, {"type": "object", "required": ["id", "piece"],
                                  "properties": {"id": _COUNT, "piece": _PIECE}}]}}}})}


_EMBEDDING = {"type": "object", "required": ["object", "index", "embedding"], "properties": {
    "object": {"const": "embedding"}, "index": _COUNT,
    "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                            {"type": "string", "contentEncoding": "base64"}]}}}
_EMBEDDINGS = {"description": "one L2-normalized vector per input, in input order", **_json({
    "type": "object", "required": ["object", "data", "model", "usage"], "properties": {
        "object": {"const": "list"}, "model": _TEXT, "data": {"type": "array", "items": _EMBEDDING},
        "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
                  "properties": {"prompt_tokens": _COUNT, "total_tokens": _COUNT}}}})}


def _embeddings_path() -> dict:
    post = _post("OpenAI embeddings (a worker started with --embeddings)", "EmbeddingRequest", _EMBEDDINGS,
                 "OpenAIError")["post"]
    error = _json(_ref("OpenAIError"))
    return {"post": {**post, "responses": {
        **post["responses"],
        "404": {"description": "the worker was started without --embeddings", **error},
        "500": {"description": "the embedding decode failed", **error},
        "504": {"description": "past --request-timeout", **error}}}}


_RESPONSE_OBJECT = {"type": "object", "required": ["id", "object", "status", "output"], "properties": {
    "id": {"type": "string", "pattern": "^resp_"}, "object": {"const": "response"},
    "status": {"enum": ["in_progress", "completed", "incomplete", "failed"]}, "output": {"type": "array"}}}
_RESPONSE_EVENT = {"oneOf": [
    {"type": "object", "required": ["type", "sequence_number"], "properties": {
        "type": {"type": "string", "pattern": "^response\\."}, "sequence_number": _COUNT}},
]}
_RESPONSE = {"description": "a response object, or the Responses API's named events when stream is true",
             "content": {"application/json": {"schema": _RESPONSE_OBJECT},
                         "text/event-stream": {"schema": _sse_event(_RESPONSE_EVENT)}}}


def _stored_response() -> dict:
    parameters = [{"name": "response_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    missing = {"description": "no stored response has this id", **_json(_ref("OpenAIError"))}
    return {
        "get": {"summary": "A stored response", "parameters": parameters,
                "responses": {"200": {"description": "the response object", **_json(_RESPONSE_OBJECT)},
                              "404": missing}},
        "delete": {"summary": "Forget a stored response", "parameters": parameters,
                   "responses": {"200": {"description": "deleted", **_json({
                       "type": "object", "required": ["id", "deleted"],
                       "properties": {"id": _TEXT, "object": {"const": "response.deleted"},
                                      "deleted": {"const": True}}})}, "404": missing}},
    }


def _one_text(name: str) -> dict:
    schema = {"type": "object", "required": [name], "properties": {name: _TEXT}}
    return {"description": f"{{{name}: text}}", **_json(schema)}


PATHS: dict[str, dict] = {
    "/v1/chat/completions": _post("OpenAI chat completion", "ChatRequest", _GENERATED, "OpenAIError"),
    "/v1/completions": _post("OpenAI text completion", "CompletionRequest", _GENERATED, "OpenAIError"),
    "/v1/messages": _post("Anthropic Messages API (text, tool_use and tool_result blocks)", "MessagesRequest", _MESSAGES, "AnthropicError"),
    "/v1/messages/count_tokens": _post("Anthropic token counting: the input tokens /v1/messages would read",
                                       "CountTokensRequest", {"description": "the count", **_json({
                                           "type": "object", "required": ["input_tokens"],
                                           "properties": {"input_tokens": _COUNT}})}, "AnthropicError"),
    "/v1/responses": _post("OpenAI Responses API (a chat turn; stored responses kept in memory)", "ResponsesRequest",
                           _RESPONSE, "OpenAIError"),
    "/v1/responses/{response_id}": _stored_response(),
    "/v1/embeddings": _embeddings_path(),
    "/tokenize": _post("Text -> token ids (llama-server's shape)", "TokenizeRequest", _TOKENS, "OpenAIError"),
    "/detokenize": _post("Token ids -> text", "DetokenizeRequest", _one_text("content"), "OpenAIError"),
    "/apply-template": _post("Chat messages -> the prompt the model's chat template makes", "ChatRequest",
                             _one_text("prompt"), "OpenAIError"),
    "/v1/models": _get("The served model", {"description": "model list", **_json({"type": "object"})}),
    "/execute": _post("Pool-manager job, streamed", "ExecuteRequest",
                      _sse("started, token*, metrics, end, [DONE]", _EXECUTE_EVENT), "ContractErrors"),
    "/v1/inference": _post("Alias of /execute", "ExecuteRequest", _sse("as /execute", _EXECUTE_EVENT),
                           "ContractErrors"),
    "/cancel": {"post": {"summary": "Cancel a job (idempotent)", "requestBody": {"required": True, **_json(_ref("CancelRequest"))},
                         "responses": {"202": {"description": "accepted"},
                                       "400": {"description": "bad body", **_json(_ref("ContractErrors"))}}}},
    "/health": _get("Liveness: 503 until the model is warm", _HEALTH),
    "/v1/health": _get("Alias of /health", _HEALTH),
    "/v1/ready": _get("Readiness and engine state", {"description": "state", **_json({"type": "object"})}),
    "/v1/loading/progress": _get("Loading stages as SSE",
                                 _sse("{stage, done, total} events, then [DONE]", _PROGRESS_EVENT)),
    "/metrics": _get("Prometheus metrics", {"description": "text format", "content": {"text/plain": {}}}),
    "/openapi.json": _get("This document", {"description": "OpenAPI 3.1", **_json({"type": "object"})}),
}


def decimal_below(n: int) -> str:
    """A regex for the decimal strings of 0..n-1, leading zeros allowed (as int() reads them).

    Digit by digit against n-1: shorter numbers, then each digit below n-1's with n-1's digits before it.
    """
    top = str(n - 1)
    shorter = [f"[0-9]{{1,{len(top) - 1}}}"] if len(top) > 1 else []
    below = [top[:i] + f"[0-{int(d) - 1}]" + f"[0-9]{{{len(top) - i - 1}}}" for i, d in enumerate(top) if d != "0"]
    return "^0*(" + "|".join([*shorter, *below, top]) + ")$"


def document(n_vocab: int | None = None) -> dict:
    """`n_vocab`: the served model's, once it is loaded; token ids are then checked against it."""
    schemas = SCHEMAS if n_vocab is None else {
        **SCHEMAS, "TokenId": {**SCHEMAS["TokenId"], "pattern": decimal_below(n_vocab)},
        "DetokenizeRequest": _detokenize_request(n_vocab),
        "PromptTokenIds": {**_TOKEN_IDS, "items": {**_TOKEN_IDS["items"], "maximum": n_vocab - 1}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "llm-worker", "version": __version__},
        "paths": PATHS,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
