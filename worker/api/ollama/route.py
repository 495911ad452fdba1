"""POST /api/chat and /api/generate: an Ollama request runs as a chat (worker/api/chat_input.py), or a raw
prompt as a completion does, so greedy text, tool calls and reasoning are the other routes'; only the shapes are
Ollama's (reply.py). Streamed as NDJSON unless the request sends stream: false."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from worker.api.chat_input import as_chat, chat_images
from worker.api.error_shapes import FAILED_STATUS
from worker.api.generation import TrackedHandle, generating, generation_input, prepare
from worker.api.ollama.reply import DONE_REASONS, Reply, open_ndjson, send_line
from worker.api.ollama.request import Model, OllamaRequest, parse_chat, parse_generate
from worker.api.problems import parse_json_object
from worker.api.reasoning_budgets import thinks
from worker.api.request_checks import served_model
from worker.api.state import WORKER, WorkerState
from worker.engine import Answer, FinishReason, Prepared, TokenEvent

routes = web.RouteTableDef()


def request_model(worker: WorkerState) -> Model:
    served = worker.require_served()
    return Model(served.facts.n_ctx_seq, worker.sampling, thinks(served), worker.settings.media)


async def _prepared(worker: WorkerState, parsed: OllamaRequest, request_id: str, model: str) -> Prepared:
    """A chat, or with raw the prompt's text as sent; options.num_ctx bounds prompt and answer together, as
    Ollama's context does (the prompt is never cut)."""
    chat = parsed.chat
    prompt = chat.messages[-1]["content"] if parsed.raw else as_chat(chat)
    images = () if parsed.raw else await chat_images(chat, worker.settings.media)
    given = generation_input(worker, chat.generation, prompt, request_id, model, chat.prompt_field, images)
    return await prepare(worker, replace(given, context_limit=parsed.num_ctx, context_limit_field="options.num_ctx"))


async def _answer(request: web.Request, handle: TrackedHandle, answer: Answer, reply: Reply, stream: bool,
                  started: float) -> web.StreamResponse:
    response = await open_ndjson(request) if stream else None

    async def send(chunk: dict[str, Any] | None) -> None:
        if chunk is not None and response is not None:
            await send_line(response, chunk)

    async for event in handle:
        if isinstance(event, TokenEvent):
            release = answer.feed(event.text)
            await send(reply.piece(release.text, release.reasoning, release.calls, event.logprobs))
    finished = handle.ended
    if finished.reason not in DONE_REASONS:
        failure = {"error": finished.message or finished.reason.value}
        if response is None:
            return web.json_response(failure, status=FAILED_STATUS[finished.reason])
        await send_line(response, failure)
        return response
    release = answer.finish(cut=finished.reason is FinishReason.LENGTH)
    await send(reply.piece(release.text, release.reasoning, release.calls))
    last = reply.last(finished, time.monotonic() - started, whole=response is None)
    if response is None:
        return web.json_response(last)
    await send_line(response, last)
    return response


def _generation_route(path: str, parse: Callable[[dict[str, Any], Model], OllamaRequest], chat: bool) -> None:
    """/api/chat and /api/generate differ only in how they read a request and where the answer's text goes."""

    async def handler(request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        worker = request.app[WORKER]
        parsed = parse(parse_json_object(await request.read()), request_model(worker))
        model = served_model(worker, parsed.chat.model)
        name = parsed.chat.model or model
        generation = parsed.chat.generation
        reply = Reply(name, chat, generation.logprobs)
        if parsed.loads_only:
            return web.json_response(reply.loaded())
        prepared = await _prepared(worker, parsed, request["request_id"], model)
        async with generating(worker, prepared) as (handle,):
            return await _answer(request, handle, prepared.answers(generation.stream), reply, generation.stream,
                                 started)

    routes.post(path)(handler)


_generation_route("/api/chat", parse_chat, chat=True)
_generation_route("/api/generate", parse_generate, chat=False)
