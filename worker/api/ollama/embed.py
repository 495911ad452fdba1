"""POST /api/embed (inputs -> L2-normalized vectors) and the older /api/embeddings (one prompt -> one vector), through
the same pooled context as /v1/embeddings (worker/api/embedding_job.py): an input that does not fit is refused, never
cut, whatever `truncate` says; an empty request is Ollama's way to load the model, answered with no vectors."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from worker.api.embedding_job import embedded, require_embeddings
from worker.api.ollama.options import read_options
from worker.api.ollama.request import keep_alive, model_name, text
from worker.api.problems import Reader, parse_json_object
from worker.api.request_checks import served_model
from worker.api.state import WORKER
from worker.engine import SamplingParams

routes = web.RouteTableDef()

INPUTS = "a string or a list of strings"


def _read(r: Reader, width: int, n_ctx_seq: int) -> Any:
    """The fields both routes share, checked: options (which change nothing for an embedding), keep_alive,
    dimensions (only the model's own: cutting a vector is for models trained for it)."""
    read_options(r, SamplingParams(), n_ctx_seq)
    keep_alive(r)
    dimensions = r.number("dimensions", integer=True, low=1, nullable=True)
    if dimensions is not None and dimensions != width:
        r.problem("dimensions", f"dimensions = {width}", f"this model's embeddings have {width} dimensions: leave "
                  f"dimensions out or send {width}", dimensions)
    return model_name(r.string("model"))


@routes.post("/api/embed")
async def embed(request: web.Request) -> web.Response:
    started = time.monotonic()
    worker = request.app[WORKER]
    served = worker.require_served()
    require_embeddings(served)
    r = Reader(parse_json_object(await request.read()))
    name = _read(r, served.pooled.embedding_width, served.facts.n_ctx_seq)
    r.boolean("truncate", True)
    raw = r.body.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not all(isinstance(item, str) and item for item in inputs):
        r.problem("input", INPUTS, f"input must be {INPUTS}, none of them empty", raw)
    r.done()
    model = served_model(worker, name)
    if not inputs:
        return web.json_response({"model": model, "embeddings": []})
    fields = ["input"] if isinstance(raw, str) else [f"input[{i}]" for i in range(len(inputs))]
    vectors, n_tokens = await embedded(worker, served, inputs, fields, INPUTS)
    return web.json_response({"model": model, "embeddings": [v.tolist() for v in vectors],
                              "total_duration": int((time.monotonic() - started) * 1e9), "load_duration": 0,
                              "prompt_eval_count": n_tokens})


@routes.post("/api/embeddings")
async def embeddings(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    served = worker.require_served()
    require_embeddings(served)
    r = Reader(parse_json_object(await request.read()))
    name = _read(r, served.pooled.embedding_width, served.facts.n_ctx_seq)
    prompt = text(r, "prompt")
    r.done()
    served_model(worker, name)
    if not prompt:
        return web.json_response({"embedding": []})
    vectors, _ = await embedded(worker, served, [prompt], ["prompt"], "a string")
    return web.json_response({"embedding": vectors[0].tolist()})
