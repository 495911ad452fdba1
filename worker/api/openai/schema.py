"""OpenAI's chat completions, completions, embeddings and models routes in /openapi.json."""

from __future__ import annotations

from typing import Any

from worker.api.generation_fields import MAX_STOP_BYTES, MAX_STOP_STRINGS, REASONING_FORMATS
from worker.api.openai.embeddings import ENCODINGS, MAX_INPUTS
from worker.api.openai.request import MAX_COMPLETION_LOGPROBS, MAX_TOP_LOGPROBS, ROLES
from worker.api.openapi_parts import (
    COUNT,
    GRAMMAR,
    PROMPT,
    TEXT,
    get,
    json_body,
    post,
    ref,
    sampling_fields,
    sse_event,
    stop_string,
)
from worker.api.reasoning_budgets import EFFORT_BUDGETS
from worker.fields import OPENAI_SAMPLING

_RESPONSE_FORMAT = {"oneOf": [
    {"type": "null"},
    {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "json_schema"], "properties": {
        "type": {"const": "json_schema"},
        "json_schema": {"type": "object", "required": ["schema"], "properties": {
            "name": {"type": "string"}, "schema": {"type": "object"}, "strict": {"type": ["boolean", "null"]}}}}},
]}


_SAMPLING = {
    **sampling_fields(OPENAI_SAMPLING),
    "max_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
    "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
    "stop": {"oneOf": [stop_string(MAX_STOP_BYTES), {"type": "null"},
                       {"type": "array", "maxItems": MAX_STOP_STRINGS, "items": stop_string(MAX_STOP_BYTES)}]},
    "logit_bias": {"type": ["object", "null"], "propertyNames": {"$ref": "#/components/schemas/TokenId"},
                   "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
    "ignore_eos": {"type": ["boolean", "null"],
                   "description": "llama-server's: end-of-generation tokens are never sampled; the answer ends at "
                                  "max_tokens or a stop string"},
    "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": ["boolean", "null"]}}},
    "model": {"type": "string", "description": "the served model or one of its LoRA adapters (GET /v1/models)"},
    "lora": {"oneOf": [{"type": "null"}, ref("LoraList")],
             "description": "LoRA adapters and scales for this request; those left out are off"},
    "n": {"type": ["integer", "null"], "minimum": 1, "description": "at most --parallel"},
    "grammar": GRAMMAR,
    "response_format": _RESPONSE_FORMAT,
}
CHAT_ONLY: dict[str, Any] = {
    "chat_template_kwargs": {"type": ["object", "null"], "properties": {"enable_thinking": {"type": "boolean"}},
                             "description": "template variables over the model's, e.g. enable_thinking"},
    "reasoning_format": {"enum": [*REASONING_FORMATS, None],
                         "description": "llama-server's: how this answer's reasoning comes back"},
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
FORCED_CALL = [
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
    "suffix": {"type": ["string", "null"],
               "description": "fill in the middle between the prompt and this text: a model with FIM tokens only"},
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
TOKEN_IDS: dict[str, Any] = {
    "type": "array", "minItems": 1,
    "items": {"type": "integer", "minimum": 0, "description": "below the model's vocabulary size"}}


SCHEMAS: dict[str, Any] = {
    # Each request schema's example streams: schemathesis sends examples first, so every SSE shape is checked.
    "ChatRequest": {"type": "object", "required": ["messages"], "examples": [{
                        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": True,
                        "stream_options": {"include_usage": True}}],
                    "properties": {"messages": {"type": "array", "minItems": 1, "items": _MESSAGE}, **_SAMPLING,
                                   **CHAT_ONLY},
                    "anyOf": FORCED_CALL},
    "CompletionRequest": {"type": "object", "required": ["prompt"], "examples": [{
                              "prompt": "Once upon a time", "max_tokens": 8, "stream": True}],
                          "properties": {"prompt": {"oneOf": [
                              PROMPT, ref("PromptTokenIds"),
                              {"type": "array", "minItems": 1, "maxItems": 1,
                               "items": {"oneOf": [PROMPT, ref("PromptTokenIds")]}}]},
                              **_SAMPLING, **_COMPLETION_EXTRAS},
                          "anyOf": _ECHO_ONCE},
    "PromptTokenIds": TOKEN_IDS,
    "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"}, "code": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "errors": {"type": "array"}}}}},
    "EmbeddingRequest": {"type": "object", "required": ["input"], "properties": {
        "input": {"oneOf": [PROMPT, ref("PromptTokenIds"), {"type": "array", "minItems": 1, "maxItems": MAX_INPUTS,
                                                             "items": {"oneOf": [PROMPT, ref("PromptTokenIds")]}}]},
        "model": {"type": "string"},
        "encoding_format": {"enum": list(ENCODINGS)},
        "dimensions": {"type": "integer", "minimum": 1, "description": "the model's width: vectors are never cut"},
        "user": {"type": "string"},
    }},
}


_USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
          "properties": {"prompt_tokens": COUNT, "completion_tokens": COUNT, "total_tokens": COUNT}}
_CHUNK = {"type": "object", "required": ["id", "object", "created", "model", "choices"], "properties": {
    "id": TEXT, "object": {"enum": ["chat.completion.chunk", "text_completion"]}, "created": COUNT, "model": TEXT,
    "choices": {"type": "array", "items": {"type": "object", "required": ["index", "finish_reason"], "properties": {
        "index": COUNT, "finish_reason": {"enum": ["stop", "length", "tool_calls", None]}}}},
    "usage": _USAGE,
}}
# A stream that fails after it opened ends with an error object instead of the last chunk.
_GENERATED = {"description": "a completion object, or SSE chunks ending with [DONE] when stream is true",
              "content": {"application/json": {"schema": {"type": "object"}},
                          "text/event-stream": {"schema": sse_event({"oneOf": [_CHUNK, SCHEMAS["OpenAIError"]]})}}}


_EMBEDDING = {"type": "object", "required": ["object", "index", "embedding"], "properties": {
    "object": {"const": "embedding"}, "index": COUNT,
    "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}},
                            {"type": "string", "contentEncoding": "base64"}]}}}
_EMBEDDINGS = {"description": "one L2-normalized vector per input, in input order", **json_body({
    "type": "object", "required": ["object", "data", "model", "usage"], "properties": {
        "object": {"const": "list"}, "model": TEXT, "data": {"type": "array", "items": _EMBEDDING},
        "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
                  "properties": {"prompt_tokens": COUNT, "total_tokens": COUNT}}}})}


def _embeddings_path() -> dict:
    operation = post("OpenAI embeddings (a worker started with --embeddings)", "EmbeddingRequest", _EMBEDDINGS,
                     "OpenAIError")["post"]
    error = json_body(ref("OpenAIError"))
    return {"post": {**operation, "responses": {
        **operation["responses"],
        "404": {"description": "the worker was started without --embeddings", **error},
        "500": {"description": "the embedding decode failed", **error},
        "504": {"description": "past --request-timeout", **error}}}}


PATHS: dict[str, dict] = {
    "/v1/chat/completions": post("OpenAI chat completion", "ChatRequest", _GENERATED, "OpenAIError"),
    "/v1/completions": post("OpenAI text completion", "CompletionRequest", _GENERATED, "OpenAIError"),
    "/v1/embeddings": _embeddings_path(),
    "/v1/models": get("The served model and its LoRA adapters",
                      {"description": "model list", **json_body({"type": "object"})}),
}
