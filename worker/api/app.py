"""The aiohttp application: routes, request ids, bearer auth, error shapes."""

from __future__ import annotations

import uuid

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client.aiohttp import make_aiohttp_handler

from worker.api import anthropic, llama_server, ollama, openai, openapi, orch, responses
from worker.api.auth import auth_middleware
from worker.api.error_shapes import error_middleware
from worker.api.state import WORKER, WorkerState

MAX_BODY_BYTES = 4 * 1024 * 1024


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex[:16]
    request["request_id"] = request_id
    with structlog.contextvars.bound_contextvars(request_id=request_id, path=request.path):
        response = await handler(request)
    if not response.prepared:
        response.headers["X-Request-Id"] = request_id
    return response


async def openapi_json(request: web.Request) -> web.Response:
    served = request.app[WORKER].served
    if served is None:
        return web.json_response(openapi.document())
    return web.json_response(openapi.document(served.facts.n_vocab, len(served.facts.loras)))


def build_app(worker: WorkerState) -> web.Application:
    # Auth runs after the request id is bound (so refusals are logged with it), before any route.
    auth = auth_middleware(worker.settings.api_keys)
    app = web.Application(client_max_size=MAX_BODY_BYTES,
                          middlewares=[request_id_middleware, auth, error_middleware])
    app[WORKER] = worker
    app.add_routes(orch.routes)
    app.add_routes(openai.routes)
    app.add_routes(anthropic.routes)
    app.add_routes(responses.routes)
    responses.stores(app)
    app.add_routes(llama_server.routes)
    app.add_routes(llama_server.lora_routes)
    app.add_routes(llama_server.rerank_routes)
    app.add_routes(llama_server.slot_routes)
    app.add_routes(llama_server.props_routes)
    app.add_routes(llama_server.infill_routes)
    app.add_routes(openai.embedding_routes)
    app.add_routes(ollama.routes)
    app.add_routes(ollama.embed_routes)
    app.add_routes(ollama.model_routes)
    app.router.add_get("/metrics", make_aiohttp_handler(worker.metrics.registry))
    app.router.add_get("/openapi.json", openapi_json)
    return app
