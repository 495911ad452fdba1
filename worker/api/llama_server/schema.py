"""llama-server's routes in /openapi.json: /tokenize, /detokenize, /apply-template, the slot routes, /props and
/infill."""

from __future__ import annotations

from typing import Any

from worker.api.llama_server.props import UNBOUNDED
from worker.api.llama_server.rerank import MAX_DOCUMENTS
from worker.api.openapi_parts import COUNT, TEXT, get, json_body, lora_list, post, ref, sampling_fields
from worker.fields import LLAMA_SERVER_SAMPLING


def detokenize_request(n_vocab: int | None) -> dict:
    ids = {"type": "integer", "minimum": 0, "description": "below the model's vocabulary size"}
    if n_vocab is not None:
        ids["maximum"] = n_vocab - 1
    return {"type": "object", "required": ["tokens"], "properties": {"tokens": {"type": "array", "items": ids}}}


SCHEMAS: dict[str, Any] = {
    "TokenizeRequest": {"type": "object", "required": ["content"], "properties": {
        "content": {"type": "string"}, "add_special": {"type": ["boolean", "null"], "default": False},
        "parse_special": {"type": ["boolean", "null"], "default": True},
        "with_pieces": {"type": ["boolean", "null"], "default": False}}},
    "DetokenizeRequest": detokenize_request(None),
    "LoraList": lora_list(None),
    "RerankRequest": {"type": "object", "required": ["query", "documents"], "properties": {
        "model": {"type": "string", "description": "the served model (not one of its LoRA adapters)"},
        "query": {"type": "string", "minLength": 1},
        "documents": {"type": "array", "minItems": 1, "maxItems": MAX_DOCUMENTS, "items": {"oneOf": [
            TEXT, {"type": "object", "required": ["text"], "additionalProperties": False,
                   "properties": {"text": TEXT}}]}},
        "top_n": {"type": ["integer", "null"], "minimum": 1, "description": "above the documents' count: all"},
        "return_documents": {"type": ["boolean", "null"], "default": False}}},
    # A completion's fields beside its own, n_predict (llama-server's max_tokens) too; the FIM tokens are the model's.
    "InfillRequest": {"type": "object", "required": ["input_prefix", "input_suffix"], "examples": [{
                          "input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", "n_predict": 8}],
                      "properties": {
                          "input_prefix": TEXT, "input_suffix": TEXT,
                          "input_extra": {"type": ["array", "null"], "items": {
                              "type": "object", "required": ["text"],
                              "properties": {"text": TEXT, "filename": TEXT}}},
                          "prompt": {"type": "string", "description": "the middle's start, which the model continues"},
                          "n_predict": {"type": ["integer", "null"], "minimum": 0, "maximum": 2**31 - 1},
                          "stream": {"type": ["boolean", "null"]}, "model": {"type": "string"},
                          **sampling_fields(LLAMA_SERVER_SAMPLING)}},
    "SlotFileRequest": {"type": "object", "properties": {"filename": {
        "type": "string", "minLength": 1, "maxLength": 255,
        "pattern": "^[^./\\\\:\\x00-\\x1f\\x7f][^/\\\\:\\x00-\\x1f\\x7f]*$",
        "description": "a plain file name inside --slot-save-path (save and restore need one)"}}},
}


_PIECE = {"oneOf": [TEXT, {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}}]}
_TOKENS = {"description": "token ids, or with_pieces {id, piece}: the piece's text, or its bytes when not UTF-8 alone",
           **json_body({"type": "object", "required": ["tokens"], "properties": {"tokens": {"type": "array", "items": {
               "oneOf": [COUNT, {"type": "object", "required": ["id", "piece"],
                                  "properties": {"id": COUNT, "piece": _PIECE}}]}}}})}


_RESULT = {"type": "object", "required": ["index", "relevance_score"], "properties": {
    "index": COUNT, "relevance_score": {"type": "number"},
    "document": {"type": "object", "required": ["text"], "properties": {"text": TEXT}}}}
_RANKED = {"description": "the documents' scores, best first (top_n of them)", **json_body({
    "type": "object", "required": ["model", "object", "usage", "results"], "properties": {
        "model": TEXT, "object": {"const": "list"}, "results": {"type": "array", "items": _RESULT},
        "usage": {"type": "object", "required": ["prompt_tokens", "total_tokens"],
                  "properties": {"prompt_tokens": COUNT, "total_tokens": COUNT}}}})}


def _rerank_path() -> dict:
    operation = post("Documents scored against a query (Jina/Cohere's shape, as llama-server answers)",
                     "RerankRequest", _RANKED, "OpenAIError")["post"]
    error = json_body(ref("OpenAIError"))
    return {"post": {**operation, "responses": {
        **operation["responses"],
        "404": {"description": "the model named is not the one served, or the model cannot rerank", **error},
        "500": {"description": "a scoring decode failed", **error},
        "504": {"description": "past --request-timeout", **error}}}}


def _one_text(name: str) -> dict:
    schema = {"type": "object", "required": [name], "properties": {name: TEXT}}
    return {"description": f"{{{name}: text}}", **json_body(schema)}


PATHS: dict[str, dict] = {
    "/tokenize": post("Text -> token ids (llama-server's shape)", "TokenizeRequest", _TOKENS, "OpenAIError"),
    "/detokenize": post("Token ids -> text", "DetokenizeRequest", _one_text("content"), "OpenAIError"),
    "/apply-template": post("Chat messages -> the prompt the model's chat template makes", "ChatRequest",
                             _one_text("prompt"), "OpenAIError"),
    "/v1/rerank": _rerank_path(),
    "/rerank": _rerank_path(),
    "/lora-adapters": {
        **get("The LoRA adapters (--lora) and the scale each applies at to requests that name none", {
            "description": "one entry per adapter, in id order", **json_body({
            "type": "array", "items": {"type": "object", "required": ["id", "path", "scale", "name"], "properties": {
                "id": COUNT, "path": TEXT, "scale": {"type": "number"}, "name": TEXT}}})}),
        **post("Set every adapter's scale for the requests that follow: those left out go to 0", "LoraList",
               {"description": "set", **json_body({"type": "object", "required": ["success"],
                                                   "properties": {"success": {"const": True}}})}, "OpenAIError"),
    },
}


_TIMINGS = {"type": "object", "properties": {"save_ms": {"type": "number"}, "restore_ms": {"type": "number"}}}
_SLOT_ANSWER = {"oneOf": [
    {"type": "object", "required": ["id_slot", "filename", "n_saved", "n_written", "timings"],
     "properties": {"id_slot": COUNT, "filename": TEXT, "n_saved": COUNT, "n_written": COUNT, "timings": _TIMINGS}},
    {"type": "object", "required": ["id_slot", "filename", "n_restored", "n_read", "timings"],
     "properties": {"id_slot": COUNT, "filename": TEXT, "n_restored": COUNT, "n_read": COUNT, "timings": _TIMINGS}},
    {"type": "object", "required": ["id_slot", "n_erased"], "properties": {"id_slot": COUNT, "n_erased": COUNT}},
]}
_SLOTS = {"type": "array", "items": {"type": "object", "required": ["id", "n_ctx", "speculative", "is_processing"],
                                     "properties": {"id": COUNT, "n_ctx": COUNT, "speculative": {"type": "boolean"},
                                                    "is_processing": {"type": "boolean"}}}}
_SLOT_ACTION = {"post": {
    "summary": "Save a slot's reusable cells to a file, restore them from one, or empty the slot (llama-server's)",
    "parameters": [
        {"name": "id_slot", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}},
        {"name": "action", "in": "query", "required": True, "schema": {"enum": ["save", "restore", "erase"]}}],
    "requestBody": {"required": False, **json_body(ref("SlotFileRequest"))},
    "responses": {"200": {"description": "n_saved / n_restored / n_erased", **json_body(_SLOT_ANSWER)},
                  "400": {"description": "every problem, listed (a slot past --parallel, a file that cannot load, "
                                         "a slot whose cells were made under LoRA adapters)",
                          **json_body(ref("OpenAIError"))},
                  "401": {"description": "missing or invalid API key"},
                  "404": {"description": "started without --slot-save-path: slots_disabled (llama-server: 501)",
                          **json_body(ref("OpenAIError"))},
                  "413": {"description": "body over the size limit", **json_body(ref("OpenAIError"))},
                  "503": {"description": "loading or draining (Retry-After)"}},
}}
PATHS["/slots"] = get("Each slot: its context and whether a request holds it (llama-server's)",
                      {"description": "the slots", **json_body(_SLOTS)})
PATHS["/slots/{id_slot}"] = _SLOT_ACTION

_UNBOUNDED = {"const": UNBOUNDED, "description": "up to the end of the request's context"}
_PARAMS = {"type": "object", "required": [f.name for f in LLAMA_SERVER_SAMPLING], "properties": {
    **sampling_fields(LLAMA_SERVER_SAMPLING), "n_predict": _UNBOUNDED, "max_tokens": _UNBOUNDED}}
_FLAG = {"type": "boolean"}
_PROPS = {"type": "object", "required": ["default_generation_settings", "total_slots", "model_path", "modalities",
                                         "chat_template"], "properties": {
    "default_generation_settings": {"type": "object", "required": ["params", "n_ctx"], "properties": {
        "params": _PARAMS, "n_ctx": COUNT}},
    "total_slots": COUNT, "model_alias": TEXT, "model_path": TEXT,
    "modalities": {"type": "object", "properties": {"vision": _FLAG, "audio": _FLAG, "video": _FLAG}},
    "chat_template": TEXT, "bos_token": TEXT, "eos_token": TEXT,
    "endpoint_slots": _FLAG, "endpoint_props": _FLAG, "endpoint_metrics": _FLAG}}
_INFILL_RESULT = {"type": "object", "required": ["content", "stop"], "properties": {
    "content": TEXT, "stop": _FLAG, "stop_type": {"enum": ["eos", "word", "limit"]}, "tokens_predicted": COUNT,
    "tokens_evaluated": COUNT, "tokens_cached": COUNT, "prompt": TEXT}}
PATHS["/infill"] = post("Code at a cursor, filled in between the text before and after it (llama-server's)",
                        "InfillRequest", {"description": "llama-server's completion result, or its data: lines when "
                                                         "stream is true",
                                          "content": {"application/json": {"schema": _INFILL_RESULT},
                                                      "text/event-stream": {"schema": {"type": "string"}}}},
                        "OpenAIError")
PATHS["/props"] = get("The sampling defaults a request starts from, the slots, the model's file and chat template "
                      "(llama-server's)", {"description": "as llama-server's GET /props answers", **json_body(_PROPS)})
