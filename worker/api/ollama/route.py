"""POST /api/chat and /api/generate: an Ollama request runs as a chat turn (worker/api/chat_turn.py), or a raw
prompt as a completion does, so greedy text, tool calls and reasoning are the other routes'; only the shapes are
Ollama's (reply.py). Streamed as NDJSON unless the request sends stream: false."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from worker.api.chat_turn import Turn, prepared_turn
from worker.api.error_shapes import FAILED_STATUS
from worker.api.generation import TrackedHandle, engine_requests, generating
from worker.api.ollama.reply import DONE_REASONS, Reply, open_ndjson, send_line
from worker.api.ollama.request import Model, OllamaRequest, parse_chat, parse_generate
from worker.api.problems import InvalidRequest, Problem, parse_json_object
from worker.api.reasoning_budgets import thinks
from worker.api.request_checks import admitted
from worker.api.state import WORKER, WorkerState
from worker.engine import Answer, ChatPrompt, FinishReason, TokenEvent

routes = web.RouteTableDef()


def request_model(worker: WorkerState) -> Model:
    served = worker.require_served()
    return Model(served.facts.n_ctx_seq, worker.sampling, served.prompts.grammar_problem, thinks(served),
                 worker.settings.media)


async def _turn(worker: WorkerState, parsed: OllamaRequest) -> Turn:
    served = worker.require_served()
    if parsed.raw:
        tokens = served.prompts.tokenize(parsed.chat.messages[-1]["content"])
        turn = Turn(ChatPrompt(tokens, reasoning=None), parsed.chat.generation)
    else:
        turn = await prepared_turn(served, parsed.chat, worker.settings.media)
    return _within_num_ctx(turn, parsed.num_ctx)


def _within_num_ctx(turn: Turn, num_ctx: int | None) -> Turn:
    """options.num_ctx bounds prompt and answer together, as Ollama's context does; the prompt is never cut."""
    if num_ctx is None:
        return turn
    prompt = len(turn.prompt.tokens)
    if prompt >= num_ctx:
        raise InvalidRequest([Problem("options.num_ctx", "prompt tokens < num_ctx", f"the prompt has {prompt} "
                                      f"tokens and options.num_ctx is {num_ctx}: no room is left for an answer; send "
                                      "a larger num_ctx (or none), or a shorter prompt", num_ctx)],
                             "context_length_exceeded")
    asked = turn.generation.max_tokens
    return replace(turn, generation=replace(turn.generation, max_tokens=min(asked or num_ctx, num_ctx - prompt)))


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
        model = admitted(worker, parsed.chat)
        name = parsed.chat.model or model
        generation = parsed.chat.generation
        reply = Reply(name, chat, generation.logprobs)
        if parsed.loads_only:
            return web.json_response(reply.loaded())
        turn = await _turn(worker, parsed)
        choices = engine_requests(worker, turn, request["request_id"], model)
        async with generating(worker, choices) as (handle,):
            return await _answer(request, handle, turn.answers(generation.stream), reply, generation.stream,
                                 started)

    routes.post(path)(handler)


_generation_route("/api/chat", parse_chat, chat=True)
_generation_route("/api/generate", parse_generate, chat=False)
