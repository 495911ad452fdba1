"""Ollama's API in /openapi.json. Its answers stream as NDJSON (one JSON object a line) unless stream is false."""

from __future__ import annotations

from typing import Any

from worker.api.generation_fields import MAX_STOP_BYTES, MAX_STOP_STRINGS
from worker.api.ollama.options import NEUTRAL, NO_EFFECT
from worker.api.ollama.reply import NDJSON
from worker.api.ollama.request import MAX_TOP_LOGPROBS, ROLES, THINK_LEVELS
from worker.api.openai.schema import CHAT_ONLY
from worker.api.openapi_parts import COUNT, TEXT, get, json_body, post, ref, sampling_fields, stop_string
from worker.fields import OLLAMA_SAMPLING

_NO_EFFECT_TYPES: dict[str, dict[str, Any]] = {
    "num_keep": {"type": ["integer", "null"], "minimum": 0}, "penalize_newline": {"type": ["boolean", "null"]}}
_OPTIONS = {"type": ["object", "null"], "additionalProperties": False, "description": (
    "Ollama's model parameters that act per request; num_ctx at most the worker's per-request context; load-time "
    "ones (num_thread, num_gpu...) and unknown ones are refused"), "properties": {
    **sampling_fields(OLLAMA_SAMPLING),
    "seed": {"type": ["integer", "null"], "minimum": -1, "maximum": 2**64 - 1, "description": "-1: random"},
    "num_predict": {"type": ["integer", "null"], "minimum": -2, "maximum": 2**31 - 1, "not": {"const": 0},
                    "description": "-1 or -2: up to the end of the context"},
    "num_ctx": {"type": ["integer", "null"], "minimum": 1, "description": "prompt + answer; at most the worker's "
                                                                         "--ctx-size / --parallel"},
    "stop": {"oneOf": [stop_string(MAX_STOP_BYTES), {"type": "null"},
                       {"type": "array", "maxItems": MAX_STOP_STRINGS, "items": stop_string(MAX_STOP_BYTES)}]},
    **{name: {"const": value, "description": "only the value that changes nothing"} for name, value in NEUTRAL.items()},
    **{name: {**_NO_EFFECT_TYPES[name], "description": "accepted; changes nothing here"} for name in NO_EFFECT},
}}
_COMMON = {
    "model": {"type": "string", "description": "the served model (name or name:latest) or one of its LoRA adapters"},
    "options": ref("OllamaOptions"),
    "format": {"oneOf": [{"enum": ["", "json", None]}, {"type": "object", "description": "a JSON schema"}]},
    "stream": {"type": ["boolean", "null"], "default": True},
    "keep_alive": {"oneOf": [{"type": ["number", "null"]}, {"type": "string", "pattern": (
        r"^(-?(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+|-?\d+(\.\d+)?)$")}],
        "description": "checked; the worker keeps its one model loaded for its life"},
    "think": {"oneOf": [{"type": ["boolean", "null"]}, {"enum": list(THINK_LEVELS)}],
              "description": "true, low, medium or high need a model that thinks"},
    "logprobs": {"type": ["boolean", "null"]},
    "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_TOP_LOGPROBS},
}
_CALL = {"type": "object", "required": ["function"], "properties": {"function": {
    "type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1},
                                                           "arguments": {"type": "object"}}}}}
_MESSAGE = {"type": "object", "required": ["role"], "properties": {
    "role": {"enum": list(ROLES)}, "content": {"type": ["string", "null"]},
    "tool_calls": {"type": ["array", "null"], "items": _CALL, "description": "an assistant's calls"},
    "tool_name": {"type": ["string", "null"], "description": "a tool message: the function it answers"},
    "thinking": {"type": ["string", "null"], "description": "an earlier turn's thinking: left out"}},
    "description": "images: base64-encoded images, for a model served with --mmproj"}
_NOTHING = {"enum": ["", None]}
SCHEMAS: dict[str, Any] = {
    "OllamaOptions": _OPTIONS,
    "OllamaChatRequest": {"type": "object", "properties": {
        **_COMMON, "messages": {"type": ["array", "null"], "items": _MESSAGE, "description": "none: load only"},
        "tools": CHAT_ONLY["tools"]}},
    "OllamaGenerateRequest": {"type": "object", "properties": {
        **_COMMON, "prompt": {"type": ["string", "null"], "description": "empty: load only"},
        "system": {"type": ["string", "null"]}, "raw": {"type": ["boolean", "null"]},
        "suffix": {**_NOTHING, "description": "not supported"}, "template": {**_NOTHING, "description": "not "
                                                                              "supported: the model's own is used"},
        "context": {"type": ["array", "null"], "maxItems": 0, "description": "not supported: use /api/chat"}},
        "description": "images: base64-encoded images, for a model served with --mmproj"},
    "OllamaEmbedRequest": {"type": "object", "required": ["input"], "properties": {
        "model": _COMMON["model"], "options": ref("OllamaOptions"), "keep_alive": _COMMON["keep_alive"],
        "input": {"oneOf": [{"type": "string", "minLength": 1},
                            {"type": "array", "items": {"type": "string", "minLength": 1}}]},
        "truncate": {"type": ["boolean", "null"], "description": "an input too long is refused, never cut"},
        "dimensions": {"type": ["integer", "null"], "minimum": 1, "description": "only the model's own width"}}},
    "OllamaEmbeddingsRequest": {"type": "object", "properties": {
        "model": _COMMON["model"], "options": ref("OllamaOptions"), "keep_alive": _COMMON["keep_alive"],
        "prompt": {"type": ["string", "null"]}}},
    "OllamaModelRequest": {"type": "object", "properties": {
        "model": _COMMON["model"], "name": {"type": "string", "description": "the older name of model"},
        "verbose": {"type": ["boolean", "null"]}, "insecure": {"type": ["boolean", "null"]},
        "stream": {"type": ["boolean", "null"]}}},
    "OllamaError": {"type": "object", "required": ["error"], "properties": {
        "error": TEXT, "code": TEXT, "errors": {"type": "array", "description": "each problem apart"}}},
}

_DONE = {"done": {"type": "boolean"}, "done_reason": {"enum": ["stop", "length", "load"]},
         **{name: COUNT for name in ("total_duration", "load_duration", "prompt_eval_count",
                                     "prompt_eval_duration", "eval_count", "eval_duration")}}
_CHAT_CHUNK = {"type": "object", "required": ["model", "created_at", "message", "done"], "properties": {
    "model": TEXT, "created_at": TEXT, **_DONE, "logprobs": {"type": "array"},
    "message": {"type": "object", "required": ["role", "content"], "properties": {
        "role": {"const": "assistant"}, "content": TEXT, "thinking": TEXT,
        "tool_calls": {"type": "array", "items": _CALL}}}}}
_GENERATE_CHUNK = {"type": "object", "required": ["model", "created_at", "response", "done"], "properties": {
    "model": TEXT, "created_at": TEXT, "response": TEXT, "thinking": TEXT, **_DONE, "logprobs": {"type": "array"}}}
_DETAILS = {"type": "object", "properties": {"format": {"const": "gguf"}, "family": TEXT, "parameter_size": TEXT,
                                             "quantization_level": TEXT}}
_LISTED = {"type": "object", "required": ["models"], "properties": {"models": {"type": "array", "items": {
    "type": "object", "required": ["name", "model", "size", "digest", "details"], "properties": {
        "name": TEXT, "model": TEXT, "size": COUNT, "digest": TEXT, "details": _DETAILS}}}}}


_STATUS = {"type": "object", "required": ["status"], "properties": {"status": {"const": "success"}}}


def _lines(line: dict) -> dict:
    """An NDJSON stream, as a list of its lines (each one JSON value); a failure mid-stream is an error line."""
    return {"type": "array", "items": {"oneOf": [line, {"type": "object", "required": ["error"],
                                                        "properties": {"error": TEXT}}]}}


def _answer(chunk: dict) -> dict:
    return {"description": "one object (stream false), or NDJSON: a chunk a line, the last done", "content": {
        "application/json": {"schema": chunk}, NDJSON: {"schema": _lines(chunk)}}}


def _refused(verb: str, method: str) -> dict:
    """A route of Ollama's model store: a one-model worker answers it 400 (docs/api.md)."""
    return {method: {"summary": f"refused: a one-model worker does not {verb} models", "responses": {
        "400": {"description": "what to do instead", **json_body(ref("OllamaError"))}}}}


PATHS: dict[str, dict] = {
    "/api/chat": post("Ollama chat", "OllamaChatRequest", _answer(_CHAT_CHUNK), "OllamaError"),
    "/api/generate": post("Ollama generate", "OllamaGenerateRequest", _answer(_GENERATE_CHUNK), "OllamaError"),
    "/api/embed": post("Ollama embeddings (L2-normalized)", "OllamaEmbedRequest", {
        "description": "vectors", **json_body({"type": "object", "required": ["embeddings"],
                                               "properties": {"embeddings": {"type": "array"}}})}, "OllamaError"),
    "/api/embeddings": post("Ollama's older embeddings route", "OllamaEmbeddingsRequest", {
        "description": "a vector", **json_body({"type": "object", "required": ["embedding"],
                                                "properties": {"embedding": {"type": "array"}}})}, "OllamaError"),
    "/api/show": post("The served model, from its GGUF", "OllamaModelRequest", {"description": "details", **json_body(
        {"type": "object", "required": ["details", "model_info", "capabilities"], "properties": {
            "details": _DETAILS, "model_info": {"type": "object"}, "template": TEXT, "parameters": TEXT,
            "capabilities": {"type": "array", "items": {"enum": ["completion", "tools", "thinking", "vision",
                                                                 "embedding"]}}}})}, "OllamaError"),
    "/api/pull": post("The served model is here already", "OllamaModelRequest", {"description": "success", "content": {
        "application/json": {"schema": _STATUS}, NDJSON: {"schema": _lines(_STATUS)}}}, "OllamaError"),
    "/api/version": get("The Ollama API version these routes follow", {"description": "version", **json_body(
        {"type": "object", "required": ["version"], "properties": {"version": TEXT}})}),
    "/api/tags": get("The served model and its LoRA adapters", {"description": "models", **json_body(_LISTED)}),
    "/api/ps": get("The served model, loaded", {"description": "models", **json_body(_LISTED)}),
    "/api/delete": _refused("delete", "delete"),
    "/api/copy": _refused("copy", "post"),
    "/api/create": _refused("create", "post"),
    "/api/push": _refused("push", "post"),
}
