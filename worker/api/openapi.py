"""The OpenAPI 3.1 document of every route, served at /openapi.json (a test keeps it true)."""

from __future__ import annotations

from typing import Any

from worker import __version__

_SAMPLING = {
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    "top_k": {"type": "integer", "minimum": 0},
    "min_p": {"type": "number", "minimum": 0, "maximum": 1},
    "repeat_penalty": {"type": "number", "minimum": 0, "maximum": 2},
    "repetition_penalty": {"type": "number", "minimum": 0, "maximum": 2},
    "repeat_last_n": {"type": "integer", "minimum": 0, "maximum": 4096},
    "presence_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "frequency_penalty": {"type": ["number", "null"], "minimum": -2, "maximum": 2},
    "seed": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**64 - 1},
    "max_tokens": {"type": ["integer", "null"], "minimum": 1},
    "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1},
    "stop": {"oneOf": [{"type": "string", "minLength": 1},
                       {"type": "array", "maxItems": 16, "items": {"type": "string", "minLength": 1}}]},
    "logit_bias": {"type": "object", "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}},
    "stream": {"type": "boolean"},
    "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
    "model": {"type": "string"},
}
_MESSAGE = {
    "type": "object", "required": ["role", "content"],
    "properties": {"role": {"type": "string"}, "content": {"oneOf": [
        {"type": "string"},
        {"type": "array", "items": {"type": "object", "required": ["type", "text"],
                                    "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}},
    ]}},
}
SCHEMAS: dict[str, Any] = {
    "ChatRequest": {"type": "object", "required": ["messages"],
                    "properties": {"messages": {"type": "array", "minItems": 1, "items": _MESSAGE}, **_SAMPLING}},
    "CompletionRequest": {"type": "object", "required": ["prompt"],
                          "properties": {"prompt": {"type": "string"}, **_SAMPLING}},
    "ExecuteRequest": {"type": "object", "required": ["job_id", "prompt", "max_tokens"], "properties": {
        "job_id": {"type": "string", "minLength": 1},
        "prompt": {"type": "string", "minLength": 1, "maxLength": 32768},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2048},
        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        "top_p": {"type": "number", "minimum": 0, "maximum": 1},
        "top_k": {"type": "integer", "minimum": 0},
        "min_p": {"type": "number", "minimum": 0, "maximum": 1},
        "repetition_penalty": {"type": "number", "minimum": 0, "maximum": 2},
        "stop": {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}},
        "seed": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**64 - 1},
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
}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict) -> dict:
    return {"content": {"application/json": {"schema": schema}}}


def _sse(description: str) -> dict:
    return {"description": description, "content": {"text/event-stream": {"schema": {"type": "string"}}}}


def _post(summary: str, body: str, ok: dict, error: str) -> dict:
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True, **_json(_ref(body))},
        "responses": {"200": ok, "400": {"description": "every problem, listed", **_json(_ref(error))},
                      "401": {"description": "missing or invalid bearer token"},
                      "413": {"description": "body over the size limit"},
                      "503": {"description": "loading, draining or queue full (Retry-After)"}},
    }}


def _get(summary: str, response: dict) -> dict:
    return {"get": {"summary": summary, "responses": {"200": response}}}


_GENERATED = {"description": "a completion object, or SSE chunks ending with [DONE] when stream is true",
              "content": {"application/json": {"schema": {"type": "object"}},
                          "text/event-stream": {"schema": {"type": "string"}}}}
_HEALTH = {"description": "healthy", **_json({"type": "object", "properties": {
    "status": {"type": "string"}, "vram_bytes": {"type": "integer"}}})}

PATHS: dict[str, dict] = {
    "/v1/chat/completions": _post("OpenAI chat completion", "ChatRequest", _GENERATED, "OpenAIError"),
    "/v1/completions": _post("OpenAI text completion", "CompletionRequest", _GENERATED, "OpenAIError"),
    "/v1/models": _get("The served model", {"description": "model list", **_json({"type": "object"})}),
    "/execute": _post("Pool-manager job, streamed", "ExecuteRequest", _sse("started, token*, metrics, end, [DONE]"),
                      "ContractErrors"),
    "/v1/inference": _post("Alias of /execute", "ExecuteRequest", _sse("as /execute"), "ContractErrors"),
    "/cancel": {"post": {"summary": "Cancel a job (idempotent)", "requestBody": {"required": True, **_json(_ref("CancelRequest"))},
                         "responses": {"202": {"description": "accepted"},
                                       "400": {"description": "bad body", **_json(_ref("ContractErrors"))}}}},
    "/health": _get("Liveness: 503 until the model is warm", _HEALTH),
    "/v1/health": _get("Alias of /health", _HEALTH),
    "/v1/ready": _get("Readiness and engine state", {"description": "state", **_json({"type": "object"})}),
    "/v1/loading/progress": _get("Loading stages as SSE", _sse("{stage, done, total} events, then [DONE]")),
    "/metrics": _get("Prometheus metrics", {"description": "text format", "content": {"text/plain": {}}}),
    "/openapi.json": _get("This document", {"description": "OpenAPI 3.1", **_json({"type": "object"})}),
}


def document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "llm-worker", "version": __version__},
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
