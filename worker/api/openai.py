"""OpenAI-compatible routes: /v1/models, /v1/chat/completions, /v1/completions."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web

from worker.api import sse
from worker.api.errors import UnknownModel
from worker.api.generation import engine_request, generating
from worker.api.problems import parse_json_object
from worker.api.schemas import Generation, check_prompt_size, parse_chat, parse_completion, prompt_chars
from worker.api.state import WORKER, WorkerState
from worker.engine import Finished, FinishReason, TokenEvent

routes = web.RouteTableDef()

_FINISH_REASONS = {FinishReason.EOS: "stop", FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}
# The other endings are failures: (HTTP status when nothing was sent yet, error code).
_FAILURES = {
    FinishReason.CANCELLED: (503, "cancelled"),
    FinishReason.TIMEOUT: (504, "timeout"),
    FinishReason.ERROR: (500, "inference_failed"),
}


@dataclass(frozen=True)
class Shape:
    """How one route family writes a choice, whole or as a streamed delta."""

    object: str
    chunk_object: str
    id_prefix: str
    choice: Callable[[str, str | None], dict[str, Any]]
    delta: Callable[[str, str | None], dict[str, Any]]
    opening_delta: dict[str, Any] | None  # chat streams announce the role first


CHAT = Shape(
    object="chat.completion",
    chunk_object="chat.completion.chunk",
    id_prefix="chatcmpl-",
    choice=lambda text, finish: {"index": 0, "message": {"role": "assistant", "content": text},
                                 "logprobs": None, "finish_reason": finish},
    delta=lambda text, finish: {"index": 0, "delta": {"content": text} if text else {},
                                "logprobs": None, "finish_reason": finish},
    opening_delta={"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None},
)

COMPLETION = Shape(
    object="text_completion",
    chunk_object="text_completion",
    id_prefix="cmpl-",
    choice=lambda text, finish: {"index": 0, "text": text, "logprobs": None, "finish_reason": finish},
    delta=lambda text, finish: {"index": 0, "text": text, "logprobs": None, "finish_reason": finish},
    opening_delta=None,
)


def _usage(finished: Finished) -> dict[str, Any]:
    return {
        "prompt_tokens": finished.prompt_tokens,
        "completion_tokens": finished.completion_tokens,
        "total_tokens": finished.prompt_tokens + finished.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": finished.cached_tokens},
    }


def _failure(finished: Finished) -> dict[str, Any]:
    code = _FAILURES[finished.reason][1]
    return {"error": {"message": finished.message or code, "type": "server_error", "param": None, "code": code}}


def _model(worker: WorkerState, requested: str | None) -> str:
    if not worker.accepts_model(requested):
        raise UnknownModel(f"model {requested!r} is not served here; this worker serves {worker.model_id!r}")
    return worker.model_id


async def _respond(request: web.Request, worker: WorkerState, shape: Shape, model: str,
                   prompt_tokens: list[int], generation: Generation) -> web.StreamResponse:
    header = {"id": shape.id_prefix + uuid.uuid4().hex, "created": int(time.time()), "model": model}
    job = engine_request(worker, prompt_tokens, generation, request["request_id"])
    async with generating(worker, job) as handle:
        if not generation.stream:
            texts = [event.text async for event in handle if isinstance(event, TokenEvent)]
            finished = handle.finished
            if finished.reason not in _FINISH_REASONS:
                return web.json_response(_failure(finished), status=_FAILURES[finished.reason][0])
            return web.json_response({
                **header, "object": shape.object,
                "choices": [shape.choice("".join(texts), _FINISH_REASONS[finished.reason])],
                "usage": _usage(finished),
            })
        chunk = {**header, "object": shape.chunk_object}
        response = await sse.open_stream(request)
        if shape.opening_delta:
            await sse.send(response, {**chunk, "choices": [shape.opening_delta]})
        async for event in handle:
            if isinstance(event, TokenEvent):
                await sse.send(response, {**chunk, "choices": [shape.delta(event.text, None)]})
        finished = handle.finished
        if finished.reason in _FINISH_REASONS:
            await sse.send(response, {**chunk, "choices": [shape.delta("", _FINISH_REASONS[finished.reason])]})
        else:
            await sse.send(response, _failure(finished))
        if generation.include_usage:
            await sse.send(response, {**chunk, "choices": [], "usage": _usage(finished)})
        await response.write(sse.DONE)
        return response


def _generation_route(path: str, parse: Callable, shape: Shape, prompt_tokens: Callable) -> None:
    """Chat and completions differ only in how they parse, tokenize and shape; the rest is shared."""

    async def handler(request: web.Request) -> web.StreamResponse:
        worker = request.app[WORKER]
        engine = worker.require_engine()
        parsed = parse(parse_json_object(await request.read()), engine.n_vocab, worker.sampling)
        check_prompt_size(*prompt_chars(parsed), engine.n_ctx_seq)
        model = _model(worker, parsed.model)
        return await _respond(request, worker, shape, model, prompt_tokens(engine, parsed), parsed.generation)

    routes.post(path)(handler)


_generation_route("/v1/chat/completions", parse_chat, CHAT, lambda engine, chat: engine.tokenize_chat(chat.messages))
_generation_route("/v1/completions", parse_completion, COMPLETION, lambda engine, text: engine.tokenize(text.prompt))


@routes.get("/v1/models")
async def models(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    return web.json_response({"object": "list", "data": [
        {"id": worker.model_id, "object": "model", "created": 0, "owned_by": "llm-worker"},
    ]})
