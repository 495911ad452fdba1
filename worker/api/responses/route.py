"""POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API run as the chat route runs a chat
(worker/api/chat_input.py), so text, calls and reasoning are the chat route's; only the shapes are its own (items.py).
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import structlog
from aiohttp import web

from worker.api import sse
from worker.api.content_feed import ENDED, feed, unsent
from worker.api.error_shapes import FAILED_STATUS, OPENAI_FAILURE_CODES, Failure, openai_body
from worker.api.generation import TrackedHandle, generating, prepare_chat
from worker.api.problems import Problem, parse_json_object
from worker.api.request_checks import served_model
from worker.api.responses.items import Event, OutputItems
from worker.api.responses.request import ResponsesRequest, parse_responses
from worker.api.responses.store import Message, ResponseStore, Stored
from worker.api.state import WORKER
from worker.engine import Answer, Finished, FinishReason

log = structlog.get_logger(__name__)
routes = web.RouteTableDef()
RESPONSES = web.AppKey("responses", ResponseStore)


def _usage(finished: Finished, reasoning_tokens: int) -> dict[str, Any]:
    """OpenAI's: input_tokens count the cached ones too."""
    return {"input_tokens": finished.prompt_tokens,
            "input_tokens_details": {"cached_tokens": finished.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": finished.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": finished.prompt_tokens + finished.completion_tokens}


def _ended(response: dict[str, Any], items: OutputItems, finished: Finished, reasoning_tokens: int) -> dict[str, Any]:
    cut = finished.reason is FinishReason.LENGTH
    return {**response, "status": "incomplete" if cut else "completed", "completed_at": int(time.time()),
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "output": items.items,
            "usage": _usage(finished, reasoning_tokens)}


def _failure(finished: Finished) -> tuple[int, dict[str, Any]]:
    status, code = FAILED_STATUS[finished.reason], OPENAI_FAILURE_CODES[finished.reason]
    return status, openai_body(Failure(status, code, [Problem("response", "completed", finished.message or code)]))


def _answered(conversation: list[Message], items: list[dict[str, Any]]) -> list[Message]:
    """The conversation with the answer appended as the chat route's assistant message (reasoning left out)."""
    text = "".join(part["text"] for item in items if item["type"] == "message" for part in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in items if item["type"] == "function_call"]
    return [*conversation, {"role": "assistant", "content": text if text or not calls else None,
                            **({"tool_calls": calls} if calls else {})}]


def _keep(store: ResponseStore, parsed: ResponsesRequest, response: dict[str, Any]) -> None:
    if parsed.store:
        store.put(Stored(response, _answered(parsed.conversation, response["output"])))


async def _stream(request: web.Request, handle: TrackedHandle, answer: Answer, response: dict[str, Any],
                  parsed: ResponsesRequest) -> web.StreamResponse:
    stream = await sse.open_stream(request)
    numbers = itertools.count()

    async def send(events: list[Event]) -> None:
        await sse.send_named(stream, [{**event, "sequence_number": next(numbers)} for event in events])

    await send([{"type": "response.created", "response": response},
                {"type": "response.in_progress", "response": response}])
    items = OutputItems()
    reasoning_tokens = await feed(handle, answer, items, send, "reasoning")
    finished = handle.ended
    if finished.reason not in ENDED:
        error = _failure(finished)[1]["error"]
        await send([{"type": "response.failed", "response": {
            **response, "status": "failed", "output": items.items,
            "error": {"code": error["code"], "message": error["message"]}}}])
        return stream
    ended = _ended(response, items, finished, reasoning_tokens)
    _keep(request.app[RESPONSES], parsed, ended)
    await send([{"type": f"response.{ended['status']}", "response": ended}])
    return stream


@routes.post("/v1/responses")
async def create(request: web.Request) -> web.StreamResponse:
    worker = request.app[WORKER]
    served = worker.require_served()
    store = request.app[RESPONSES]
    parsed = parse_responses(parse_json_object(await request.read()), served.facts.n_vocab, worker.sampling,
                             worker.settings.engine.parallel, store, len(served.facts.loras),
                             worker.intake(served))
    chat = parsed.chat
    model = served_model(worker, chat.model)
    prepared = await prepare_chat(worker, chat, request["request_id"], model)
    response = {"id": "resp_" + uuid.uuid4().hex, "object": "response", "created_at": int(time.time()),
                "status": "in_progress", "model": model, "output": [], "error": None,
                "incomplete_details": None, "usage": None, **parsed.echoed}
    answer = prepared.answers(parsed.stream)
    async with generating(worker, prepared) as (handle,):
        if parsed.stream:
            return await _stream(request, handle, answer, response, parsed)
        items = OutputItems()
        reasoning_tokens = await feed(handle, answer, items, unsent, "reasoning")
        finished = handle.ended
        if finished.reason not in ENDED:
            status, body = _failure(finished)
            return web.json_response(body, status=status)
        ended = _ended(response, items, finished, reasoning_tokens)
        _keep(store, parsed, ended)
        return web.json_response(ended)


def _not_found(response_id: str) -> web.Response:
    problem = Problem("response_id", "a stored response's id", f"no stored response has id {response_id!r} (responses "
                      "are kept in memory, the most recent ones, until restart)", response_id)
    return web.json_response(openai_body(Failure(404, "not_found", [problem])), status=404)


@routes.get("/v1/responses/{response_id}")
async def get(request: web.Request) -> web.Response:
    response_id = request.match_info["response_id"]
    stored = request.app[RESPONSES].get(response_id)
    return web.json_response(stored.response) if stored is not None else _not_found(response_id)


@routes.delete("/v1/responses/{response_id}")
async def delete(request: web.Request) -> web.Response:
    response_id = request.match_info["response_id"]
    if not request.app[RESPONSES].delete(response_id):
        return _not_found(response_id)
    log.info("response_deleted", response_id=response_id)
    return web.json_response({"id": response_id, "object": "response.deleted", "deleted": True})


def stores(app: web.Application) -> None:
    """Give the app its response store (at build time: an app's keys are fixed once it runs)."""
    app[RESPONSES] = ResponseStore()
