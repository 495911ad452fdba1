"""The pool-manager contract's routes in /openapi.json: /execute, /cancel, /health, /v1/ready, loading progress."""

from __future__ import annotations

from typing import Any

from worker.api.openapi_parts import (
    COUNT,
    GRAMMAR,
    TEXT,
    event,
    get,
    json_body,
    post,
    ref,
    sampling_fields,
    sse,
    stop_string,
)
from worker.api.orch.request import EXECUTE_STOP_BYTES, EXECUTE_STOP_STRINGS
from worker.fields import EXECUTE_SAMPLING

SCHEMAS: dict[str, Any] = {
    "ExecuteRequest": {"type": "object", "required": ["job_id", "prompt", "max_tokens"],
                       "examples": [{"job_id": "job-1", "prompt": "Once upon a time", "max_tokens": 8}], "properties": {
        "job_id": {"type": "string", "minLength": 1},
        "prompt": {"type": "string", "minLength": 1, "maxLength": 32768},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 2048},
        **sampling_fields(EXECUTE_SAMPLING),
        "stop": {"type": ["array", "null"], "maxItems": EXECUTE_STOP_STRINGS,
                 "items": stop_string(EXECUTE_STOP_BYTES)},
        "grammar": GRAMMAR,
        "json_schema": {"type": ["object", "null"], "description": "a JSON schema the output must validate against"},
    }},
    "CancelRequest": {"type": "object", "required": ["job_id"],
                      "properties": {"job_id": {"type": "string", "minLength": 1}}},
    "ContractErrors": {"type": "object", "required": ["errors"], "properties": {"errors": {"type": "array", "items": {
        "type": "object", "required": ["field", "constraint", "message"],
        "properties": {"field": {"type": "string"}, "constraint": {"type": "string"}, "message": {"type": "string"},
                       "value": {}, "code": {"type": "string"}}}}}},
}


_EXECUTE_EVENT = {"oneOf": [
    event("started", {"job_id": TEXT, "model": TEXT, "started_at": {"type": "string", "format": "date-time"}}),
    event("token", {"t": TEXT, "i": COUNT}),
    event("metrics", {"tokens_per_sec": {"type": "number", "minimum": 0}, "vram_bytes": COUNT}),
    event("end", {"tokens_out": COUNT, "prompt_tokens_cached": COUNT, "decode_time_ms": COUNT,
                   "stop_reason": {"enum": ["EOS", "STOP_SEQUENCE", "MAX_TOKENS", "CANCELLED"]}},
           {"stop_sequence_matched": TEXT}),
    event("error", {"code": {"enum": ["INFERENCE_FAILED", "TIMEOUT"]}, "message": TEXT}),
]}
_PROGRESS_EVENT = {"type": "object", "required": ["stage", "done", "total"],
                   "properties": {"stage": TEXT, "done": COUNT, "total": COUNT}}
_HEALTH = {"description": "healthy", **json_body({"type": "object", "properties": {
    "status": {"type": "string"}, "vram_bytes": {"type": "integer"},
    "cache_ram_limit_bytes": COUNT, "cache_ram_bytes": COUNT,
    "input_modalities": {"type": "array", "items": {"enum": ["text", "image", "audio"]}},
    "exactness": {"type": "object", "properties": {
        "prefix_cache": {"enum": ["exact", "fast", "off"]},
        "library": {"enum": ["default", "batch-invariant", "LLAMA_CPP_LIB_PATH"]},
        "ggml_batch_invariant": {"type": "boolean"}, "flash_attn": {"enum": ["on", "off", "auto"]},
        "cache_type_k": {"type": "string"}, "cache_type_v": {"type": "string"}, "attention_pinned": {"type": "boolean"},
        "attention_workaround": {"type": ["string", "null"]},
        "tiled_mm": {"type": "boolean"}, "repack": {"type": "boolean"},
        "decoded_cells_exact": {"type": ["boolean", "null"]}, "batch_invariant": {"type": ["boolean", "null"]},
        "moved_cells_exact": {"type": ["boolean", "null"]},
        "answers_reused": {"type": "boolean"}, "speculative": {"enum": ["none", "ngram", "draft"]},
        "drafts_keep_text": {"type": ["boolean", "null"]}}}}})}


PATHS: dict[str, dict] = {
    "/execute": post("Pool-manager job, streamed", "ExecuteRequest",
                      sse("started, token*, metrics, end, [DONE]", _EXECUTE_EVENT), "ContractErrors"),
    "/v1/inference": post("Alias of /execute", "ExecuteRequest", sse("as /execute", _EXECUTE_EVENT),
                           "ContractErrors"),
    "/cancel": {"post": {"summary": "Cancel a job (idempotent)",
                         "requestBody": {"required": True, **json_body(ref("CancelRequest"))},
                         "responses": {"202": {"description": "accepted"},
                                       "400": {"description": "bad body", **json_body(ref("ContractErrors"))}}}},
    "/health": get("Liveness: 503 until the model is warm", _HEALTH),
    "/v1/health": get("Alias of /health", _HEALTH),
    "/v1/ready": get("Readiness and engine state", {"description": "state", **json_body({"type": "object"})}),
    "/v1/loading/progress": get("Loading stages as SSE",
                                 sse("{stage, done, total} events, then [DONE]", _PROGRESS_EVENT)),
}
