"""POST /v1/messages and /v1/messages/count_tokens: a Messages request runs as a chat (worker/api/chat_input.py),
so greedy text, tool calls and reasoning are the chat route's; only the shapes are Anthropic's (blocks.py).
count_tokens stops where generation would start: at the prepared request's prompt."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from aiohttp import web

from worker.api import sse
from worker.api.anthropic.blocks import Blocks
from worker.api.anthropic.request import parse_messages
from worker.api.content_feed import feed, unsent
from worker.api.error_shapes import FAILED_STATUS, anthropic_error
from worker.api.generation import TrackedHandle, generating, prepare_chat
from worker.api.generation_fields import ChatRequest
from worker.api.problems import parse_json_object
from worker.api.reasoning_budgets import thinks
from worker.api.request_checks import served_model
from worker.api.state import WORKER
from worker.engine import Answer, Finished, FinishReason, Prepared

routes = web.RouteTableDef()

STOP_REASONS = {FinishReason.EOS: "end_turn", FinishReason.LENGTH: "max_tokens", FinishReason.STOP: "stop_sequence"}
# The other endings are failures (errors.FAILED_STATUS): Anthropic's error type for each.
_FAILURE_TYPES = {FinishReason.CANCELLED: "overloaded_error", FinishReason.TIMEOUT: "api_error",
                  FinishReason.ERROR: "api_error"}


def _ending(finished: Finished, answer: Answer) -> dict[str, Any]:
    """stop_reason "tool_use" when the model ended its turn after calling tools."""
    called = answer.called and finished.reason in (FinishReason.EOS, FinishReason.STOP)
    return {"stop_reason": "tool_use" if called else STOP_REASONS[finished.reason],
            "stop_sequence": finished.stop_sequence}


def _usage(finished: Finished) -> dict[str, int]:
    """As Anthropic counts: input_tokens are the prompt tokens not read from the cache."""
    return {"input_tokens": finished.prompt_tokens - finished.cached_tokens,
            "cache_read_input_tokens": finished.cached_tokens, "output_tokens": finished.completion_tokens}


def _failure(finished: Finished) -> tuple[int, dict[str, Any]]:
    kind = _FAILURE_TYPES[finished.reason]
    return FAILED_STATUS[finished.reason], anthropic_error(kind, finished.reason.value,
                                                           finished.message or finished.reason.value)


async def _stream(request: web.Request, handle: TrackedHandle, answer: Answer, message: dict[str, Any],
                  input_tokens: int) -> web.StreamResponse:
    response = await sse.open_stream(request)
    send = partial(sse.send_named, response)

    await send([{"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}, {"type": "ping"}])
    await feed(handle, answer, Blocks(), send, "thinking")
    finished = handle.ended
    if finished.reason not in STOP_REASONS:
        await send([_failure(finished)[1]])
        return response
    await send([{"type": "message_delta", "delta": _ending(finished, answer), "usage": _usage(finished)},
                {"type": "message_stop"}])
    return response


async def _prepared(request: web.Request, counting: bool = False) -> tuple[ChatRequest, str, Prepared]:
    """The request read and made ready up to its prompt, as /v1/messages would generate from it; with the model id
    the answer names."""
    worker = request.app[WORKER]
    served = worker.require_served()
    chat = parse_messages(parse_json_object(await request.read()), worker.sampling, counting, thinks(served),
                          len(served.facts.loras), worker.settings.media)
    model = served_model(worker, chat.model)
    return chat, model, await prepare_chat(worker, chat, request["request_id"], model)


@routes.post("/v1/messages/count_tokens")
async def count_tokens(request: web.Request) -> web.Response:
    """The prompt tokens the same request to /v1/messages would have: its input_tokens and cache reads together."""
    _, _, prepared = await _prepared(request, counting=True)
    return web.json_response({"input_tokens": prepared.prompt_tokens})


@routes.post("/v1/messages")
async def messages(request: web.Request) -> web.StreamResponse:
    worker = request.app[WORKER]
    chat, model, prepared = await _prepared(request)
    message = {"id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant", "model": model}
    answer = prepared.answers(chat.generation.stream)
    async with generating(worker, prepared) as (handle,):
        if chat.generation.stream:
            return await _stream(request, handle, answer, message, prepared.prompt_tokens)
        blocks = Blocks()
        await feed(handle, answer, blocks, unsent, "thinking")
        finished = handle.ended
        if finished.reason not in STOP_REASONS:
            status, body = _failure(finished)
            return web.json_response(body, status=status)
        return web.json_response({**message, "content": blocks.content, **_ending(finished, answer),
                                  "usage": _usage(finished)})
