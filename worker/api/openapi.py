"""The OpenAPI 3.1 document of every route, served at /openapi.json (a test keeps it true): each dialect's part
(its package's schema.py) assembled, and the served model's vocabulary written into the token id schemas."""

from __future__ import annotations

from typing import Any

from worker import __version__
from worker.api.anthropic import schema as anthropic
from worker.api.llama_server import schema as llama_server
from worker.api.ollama import schema as ollama
from worker.api.openai import schema as openai
from worker.api.openapi_parts import get, json_body, lora_list
from worker.api.orch import schema as orch
from worker.api.responses import schema as responses

_DIALECTS = (openai, orch, llama_server, anthropic, responses, ollama)
SCHEMAS: dict[str, Any] = {
    "TokenId": {"type": "string", "pattern": "^[0-9]+$", "description": "a token id of the served model"},
    **{name: schema for dialect in _DIALECTS for name, schema in dialect.SCHEMAS.items()},
}
PATHS: dict[str, dict] = {
    **{path: item for dialect in _DIALECTS for path, item in dialect.PATHS.items()},
    "/metrics": get("Prometheus metrics", {"description": "text format", "content": {"text/plain": {}}}),
    "/openapi.json": get("This document", {"description": "OpenAPI 3.1", **json_body({"type": "object"})}),
}


def decimal_below(n: int) -> str:
    """A regex for the decimal strings of 0..n-1, leading zeros allowed (as int() reads them).

    Digit by digit against n-1: shorter numbers, then each digit below n-1's with n-1's digits before it.
    """
    top = str(n - 1)
    shorter = [f"[0-9]{{1,{len(top) - 1}}}"] if len(top) > 1 else []
    below = [top[:i] + f"[0-{int(d) - 1}]" + f"[0-9]{{{len(top) - i - 1}}}" for i, d in enumerate(top) if d != "0"]
    return "^0*(" + "|".join([*shorter, *below, top]) + ")$"


def document(n_vocab: int | None = None, n_adapters: int | None = None) -> dict:
    """`n_vocab` and `n_adapters`: the served model's vocabulary size and LoRA adapters, once it is loaded; token
    ids and adapter ids are then checked against them."""
    schemas = SCHEMAS if n_vocab is None else {
        **SCHEMAS, "TokenId": {**SCHEMAS["TokenId"], "pattern": decimal_below(n_vocab)},
        "DetokenizeRequest": llama_server.detokenize_request(n_vocab),
        "PromptTokenIds": {**openai.TOKEN_IDS, "items": {**openai.TOKEN_IDS["items"], "maximum": n_vocab - 1}},
        "LoraList": lora_list(n_adapters)}
    return {
        "openapi": "3.1.0",
        "info": {"title": "llm-worker", "version": __version__},
        "paths": PATHS,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }

