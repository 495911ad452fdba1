"""llama-server's text utility routes in /openapi.json: /tokenize, /detokenize, /apply-template."""

from __future__ import annotations

from typing import Any

from worker.api.openapi_parts import COUNT, TEXT, get, json_body, lora_list, post


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
}


_PIECE = {"oneOf": [TEXT, {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}}]}
_TOKENS = {"description": "token ids, or with_pieces {id, piece}: the piece's text, or its bytes when not UTF-8 alone",
           **json_body({"type": "object", "required": ["tokens"], "properties": {"tokens": {"type": "array", "items": {
               "oneOf": [COUNT, {"type": "object", "required": ["id", "piece"],
                                  "properties": {"id": COUNT, "piece": _PIECE}}]}}}})}


def _one_text(name: str) -> dict:
    schema = {"type": "object", "required": [name], "properties": {name: TEXT}}
    return {"description": f"{{{name}: text}}", **json_body(schema)}


PATHS: dict[str, dict] = {
    "/tokenize": post("Text -> token ids (llama-server's shape)", "TokenizeRequest", _TOKENS, "OpenAIError"),
    "/detokenize": post("Token ids -> text", "DetokenizeRequest", _one_text("content"), "OpenAIError"),
    "/apply-template": post("Chat messages -> the prompt the model's chat template makes", "ChatRequest",
                             _one_text("prompt"), "OpenAIError"),
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
