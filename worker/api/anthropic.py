"""Anthropic's Messages API, POST /v1/messages: its request, answer, event stream and error shapes.

The conversation renders through the model's chat template as /v1/chat/completions renders it
(system first), and runs through the same generation path, so greedy text is the same on both.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from worker.api import sse
from worker.api.errors import UnknownModel, anthropic_error
from worker.api.generation import TrackedHandle, engine_requests, generating
from worker.api.problems import Reader, parse_json_object
from worker.api.schemas import MAX_STOP_BYTES, MAX_STOP_STRINGS, Generation, check_prompt_size
from worker.api.state import WORKER
from worker.engine import Finished, FinishReason, SamplingParams, TokenEvent

routes = web.RouteTableDef()

STOP_REASONS = {FinishReason.EOS: "end_turn", FinishReason.LENGTH: "max_tokens", FinishReason.STOP: "stop_sequence"}
# The other endings are failures: (HTTP status when nothing was sent yet, Anthropic's error type).
_FAILURES = {
    FinishReason.CANCELLED: (503, "overloaded_error"),
    FinishReason.TIMEOUT: (504, "api_error"),
    FinishReason.ERROR: (500, "api_error"),
}

# Request fields that would change the answer and are not implemented: refused, never ignored.
_UNSUPPORTED = {
    "tools": "tool use is not supported yet",
    "tool_choice": "tool use is not supported yet",
    "mcp_servers": "MCP servers are not supported",
}
# Content blocks other than text, and why each is refused.
_UNSUPPORTED_BLOCKS = {
    "tool_use": "tool use is not supported yet",
    "tool_result": "tool results are not supported yet (tool use is not)",
    "image": "images are not supported yet",
    "document": "documents are not supported yet",
    "thinking": "thinking blocks are not supported",
    "redacted_thinking": "thinking blocks are not supported",
}


@dataclass(frozen=True)
class MessagesRequest:
    model: str | None
    messages: list[dict[str, str]]  # in the chat template's terms: the system prompt first
    prefill: str  # a final assistant message, which the model continues (the answer holds what follows)
    generation: Generation


def _text(r: Reader, field: str, content: Any) -> str | None:
    """Anthropic content: a string, or a list of text blocks (joined as chat joins text parts)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        r.problem(field, "a string or a list of text blocks",
                  f"{field} must be a string or a list of text blocks", content)
        return None
    texts = []
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(kind, str) and kind in _UNSUPPORTED_BLOCKS:
            r.problem(f"{field}[{i}]", "a text block", f"{kind} blocks: {_UNSUPPORTED_BLOCKS[kind]}", kind)
        else:
            r.problem(f"{field}[{i}]", "a text block",
                      'a content block must be {"type": "text", "text": a string}', block)
    return "".join(texts) if len(texts) == len(content) else None


def _conversation(r: Reader) -> tuple[list[dict[str, str]], str]:
    """The chat template's messages and the prefill, if the last message is the assistant's."""
    messages = []
    system = r.body.get("system")
    if system is not None and (text := _text(r, "system", system)) is not None:
        messages.append({"role": "system", "content": text})
    raw = r.body.get("messages")
    if not isinstance(raw, list) or not raw:
        r.problem("messages", "a non-empty list", "messages must be a non-empty list of {role, content}", raw)
        return messages, ""
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            r.problem(f"messages[{i}]", "{role, content}", "each message must be an object {role, content}", message)
            continue
        role = message.get("role")
        if role not in ("user", "assistant"):
            r.problem(f"messages[{i}].role", "user or assistant",
                      "role must be user or assistant (a system prompt goes in the top-level system field)", role)
        text = _text(r, f"messages[{i}].content", message.get("content"))
        if role in ("user", "assistant") and text is not None:
            messages.append({"role": role, "content": text})
    if messages and messages[-1]["role"] == "assistant":
        # Rendered as a turn, the template would close it; the answer must continue it instead.
        return messages[:-1], messages[-1]["content"]
    return messages, ""


def parse_messages(body: dict[str, Any], defaults: SamplingParams = SamplingParams()) -> MessagesRequest:
    """A Messages request over the model's sampling defaults, with every problem listed."""
    r = Reader(body)
    model = r.string("model")
    for name, why in _UNSUPPORTED.items():
        if r.body.get(name) not in (None, [], {}):
            r.problem(name, "not supported", why, r.body[name])
    thinking = r.body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        # "adaptive" leaves thinking to the model, and not thinking is its answer.
        r.problem("thinking", "not supported", "extended thinking with a budget is not supported", thinking)
    output = r.body.get("output_config")
    if isinstance(output, dict) and output.get("format") is not None:
        r.problem("output_config.format", "not supported", "structured output is not supported", output["format"])
    metadata = r.body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        r.problem("metadata", "an object", "metadata must be an object", metadata)
    messages, prefill = _conversation(r)
    max_tokens = r.number("max_tokens", required=True, low=1, high=2**31 - 1, integer=True)
    sampling = replace(
        defaults,
        temperature=r.number("temperature", defaults.temperature, low=0, high=1),
        top_p=r.number("top_p", defaults.top_p, low=0, high=1),
        top_k=r.number("top_k", defaults.top_k, low=0, integer=True),
    )
    stop = r.stop_strings("stop_sequences", max_items=MAX_STOP_STRINGS, max_bytes=MAX_STOP_BYTES, allow_single=False)
    stream = r.boolean("stream")
    r.done()
    return MessagesRequest(model, messages, prefill, Generation(max_tokens, sampling, stop, stream))


def _ending(finished: Finished) -> dict[str, Any]:
    return {"stop_reason": STOP_REASONS[finished.reason], "stop_sequence": finished.stop_sequence}


def _usage(finished: Finished) -> dict[str, int]:
    return {"input_tokens": finished.prompt_tokens, "output_tokens": finished.completion_tokens}


def _failure(finished: Finished) -> tuple[int, dict[str, Any]]:
    status, kind = _FAILURES[finished.reason]
    return status, anthropic_error(kind, finished.reason.value, finished.message or finished.reason.value)


async def _send(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    """One event, named by its type on an `event:` line as Anthropic's clients expect."""
    await response.write(f"event: {payload['type']}\n".encode() + sse.encode(payload))


async def _stream(request: web.Request, handle: TrackedHandle, message: dict[str, Any],
                  input_tokens: int) -> web.StreamResponse:
    response = await sse.open_stream(request)
    await _send(response, {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 0}}})
    await _send(response, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    await _send(response, {"type": "ping"})
    async for event in handle:
        if isinstance(event, TokenEvent) and event.text:
            await _send(response, {"type": "content_block_delta", "index": 0,
                                   "delta": {"type": "text_delta", "text": event.text}})
    finished = handle.finished
    if finished.reason not in STOP_REASONS:
        await _send(response, _failure(finished)[1])
        return response
    await _send(response, {"type": "content_block_stop", "index": 0})
    await _send(response, {"type": "message_delta", "delta": _ending(finished), "usage": _usage(finished)})
    await _send(response, {"type": "message_stop"})
    return response


@routes.post("/v1/messages")
async def messages(request: web.Request) -> web.StreamResponse:
    worker = request.app[WORKER]
    engine = worker.require_engine()
    parsed = parse_messages(parse_json_object(await request.read()), worker.sampling)
    chars = sum(len(m["content"]) for m in parsed.messages) + len(parsed.prefill)
    check_prompt_size("messages", chars, engine.n_ctx_seq)
    if not worker.accepts_model(parsed.model):
        raise UnknownModel(f"model {parsed.model!r} is not served here; this worker serves {worker.model_id!r}")
    prompt_tokens = engine.tokenize_chat(parsed.messages, parsed.prefill)
    message = {"id": "msg_" + uuid.uuid4().hex, "type": "message", "role": "assistant", "model": worker.model_id}
    choices = engine_requests(worker, prompt_tokens, parsed.generation, request["request_id"])
    async with generating(worker, choices) as (handle,):
        if parsed.generation.stream:
            return await _stream(request, handle, message, len(prompt_tokens))
        text = "".join([event.text async for event in handle if isinstance(event, TokenEvent)])
        finished = handle.finished
        if finished.reason not in STOP_REASONS:
            status, body = _failure(finished)
            return web.json_response(body, status=status)
        return web.json_response({**message, "content": [{"type": "text", "text": text}], **_ending(finished),
                                  "usage": _usage(finished)})
