"""Ollama's routes about models, answered as a one-model worker: /api/version, /api/tags and /api/ps list the served
model (and its LoRA adapters), /api/show describes it from its GGUF, /api/pull of it succeeds at once, and the routes
that change the model store refuse, saying what to do instead (docs/api.md, "Ollama's API")."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from worker.api.ollama.reply import NDJSON
from worker.api.ollama.request import model_name
from worker.api.problems import InvalidRequest, Problem, Reader, parse_json_object
from worker.api.reasoning_budgets import thinks
from worker.api.request_checks import served_model
from worker.api.state import WORKER, WorkerState
from worker.engine import SamplingParams
from worker.fields import OLLAMA_SAMPLING
from worker.lazy import standalone_module
from worker.user_cache import content_sha256

if TYPE_CHECKING:
    from worker.engine import ServedModel

routes = web.RouteTableDef()
# gguf's file types, without its package (numpy, PyYAML: ~12 MB a worker serving a local GGUF never needs).
_gguf_constants = standalone_module("gguf", "constants")

# The Ollama release whose API these routes follow; clients check it (Copilot's Ollama provider wants 0.6.4 or later).
OLLAMA_VERSION = "0.12.0"
NEVER = "2318-01-01T00:00:00Z"  # /api/ps's expires_at: the worker holds its model for its life, as keep_alive -1 does


@functools.lru_cache(maxsize=4)
def _digest(path: Path) -> str:
    """The GGUF's sha256, read once (a registry blob is named by it; other files are hashed, ~0.13 s per 100 MB)."""
    return content_sha256(path)


def _modified(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat()


def _size_label(n_params: int) -> str:
    """Ollama's parameter_size: "135M", "7.2B"."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n_params >= scale:
            return f"{n_params / scale:.3g}{unit}"
    return str(n_params)


def _quantization(metadata: dict[str, str]) -> str:
    file_type = metadata.get("general.file_type", "")
    try:
        return _gguf_constants.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
    except ValueError:
        return "unknown"


def _details(served: ServedModel, parent: str = "") -> dict[str, Any]:
    arch = served.facts.metadata.get("general.architecture", "")
    return {"parent_model": parent, "format": "gguf", "family": arch, "families": [arch],
            "parameter_size": _size_label(served.facts.n_params),
            "quantization_level": _quantization(served.facts.metadata)}


async def _entries(worker: WorkerState, **extra: Any) -> list[dict[str, Any]]:
    """The served model, then its LoRA adapters, which a request's `model` may name too."""
    served = worker.require_served()
    path = served.facts.path
    digest = await asyncio.to_thread(_digest, path)
    entry = {"modified_at": _modified(path), "size": path.stat().st_size, "digest": digest, **extra}
    return [{"name": worker.model_id, "model": worker.model_id, **entry, "details": _details(served)},
            *({"name": lora.name, "model": lora.name, **entry, "details": _details(served, worker.model_id)}
              for lora in worker.adapters.loras)]


@routes.get("/api/version")
async def version(_request: web.Request) -> web.Response:
    return web.json_response({"version": OLLAMA_VERSION})


@routes.get("/api/tags")
async def tags(request: web.Request) -> web.Response:
    return web.json_response({"models": await _entries(request.app[WORKER])})


@routes.get("/api/ps")
async def running(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    facts = worker.require_served().facts
    return web.json_response({"models": await _entries(worker, expires_at=NEVER, size_vram=facts.device_bytes,
                                                       context_length=facts.n_ctx_seq)})


def _named(worker: WorkerState, body: dict[str, Any]) -> str:
    """The model a request names (`model`, or the older `name`), which must be the one served here."""
    r = Reader(body)
    model, name = r.string("model", ""), r.string("name", "")
    for flag in ("verbose", "insecure", "stream"):
        r.boolean(flag)
    r.done()
    return served_model(worker, model_name(model or name) or None)


def capabilities(served: ServedModel) -> list[str]:
    """What the model does here: tools where its chat template shows them, thinking where it writes reasoning, vision
    with a projector, embedding with --embeddings."""
    found = ["completion"]
    found += ["tools"] if served.prompts.chat.shows_tools else []
    found += ["thinking"] if thinks(served) else []
    found += ["vision"] if "image" in served.prompts.input_modalities else []
    found += ["embedding"] if served.pooled.pooling is not None else []
    return found


def _model_info(served: ServedModel) -> dict[str, Any]:
    """The GGUF's metadata with numbers as numbers; `<arch>.context_length` is what a request may use here (the
    clients size prompts by it), not the length the model was trained to."""
    info: dict[str, Any] = {key: _typed(value) for key, value in served.facts.metadata.items()
                            if not key.startswith("tokenizer.chat_template")}  # /api/show's template has it
    info["general.parameter_count"] = served.facts.n_params
    info[f"{info.get('general.architecture', '')}.context_length"] = served.facts.n_ctx_seq
    return info


def _typed(value: str) -> Any:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value, value)


def _parameters(worker: WorkerState, served: ServedModel) -> str:
    """Modelfile PARAMETER lines: the context a request gets, and the sampling defaults a request starts from (the
    models.toml entry's, else the GGUF's, else llama-server's: api/model_sampling.py) where they change the chain."""
    neutral, defaults = SamplingParams(), worker.sampling
    lines = [f"num_ctx {served.facts.n_ctx_seq}"]
    lines += [f"{f.name} {getattr(defaults, f.sets)}" for f in OLLAMA_SAMPLING
              if getattr(defaults, f.sets) != getattr(neutral, f.sets)]
    return "\n".join(lines)


@routes.post("/api/show")
async def show(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    served = worker.require_served()
    _named(worker, parse_json_object(await request.read()))
    path = served.facts.path
    return web.json_response({
        "license": served.facts.metadata.get("general.license", ""),
        "modelfile": f"# served by llm-worker\nFROM {path}\n",
        "parameters": _parameters(worker, served),
        "template": served.prompts.template_source or "",
        "details": _details(served),
        "model_info": _model_info(served),
        "capabilities": capabilities(served),
        "modified_at": _modified(path),
    })


@routes.post("/api/pull")
async def pull(request: web.Request) -> web.StreamResponse:
    """The served model is here already: success, streamed (the default) or as one object."""
    worker = request.app[WORKER]
    body = parse_json_object(await request.read())
    _named(worker, body)
    if body.get("stream") is False:
        return web.json_response({"status": "success"})
    return web.Response(body=b'{"status":"success"}\n', content_type=NDJSON)


def _refuse(verb: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        worker = request.app[WORKER]
        raise InvalidRequest([Problem("model", "the served model, unchanged", f"this worker serves one model, "
                                      f"{worker.model_id!r}, for its life: it does not {verb} models; run a worker "
                                      "for each model (llm-worker serve --model ...), and fetch or list models with "
                                      "llm-worker pull and llm-worker models")], "one_model")

    return handler


routes.delete("/api/delete")(_refuse("delete"))
routes.post("/api/copy")(_refuse("copy"))
routes.post("/api/create")(_refuse("create"))
routes.post("/api/push")(_refuse("push"))
