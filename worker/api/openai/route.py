"""OpenAI-compatible routes: /v1/models, /v1/chat/completions, /v1/completions."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from worker.api import sse
from worker.api.error_shapes import FAILED_STATUS, OPENAI_FAILURE_CODES
from worker.api.generation import TrackedHandle, generating, generation_input, merged, prepare, prepare_chat
from worker.api.generation_fields import ChatRequest, Generation
from worker.api.openai.logprobs import CompletionLogprobs, chat_logprobs, joined
from worker.api.openai.request import CompletionRequest, parse_chat, parse_completion
from worker.api.problems import parse_json_object
from worker.api.request_checks import served_model
from worker.api.state import WORKER, WorkerState
from worker.engine import (
    Answer,
    Finished,
    FinishReason,
    Infill,
    Prepared,
    Prompt,
    PromptLogprobs,
    Release,
    TokenEvent,
    TokenLogprob,
    ToolCall,
)

if TYPE_CHECKING:
    from worker.engine import ServedModel

routes = web.RouteTableDef()

_FINISH_REASONS = {FinishReason.EOS: "stop", FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}


Formatter = Callable[[tuple[TokenLogprob, ...]], dict[str, Any]]


@dataclass(frozen=True)
class Shape:
    """How one route family writes a choice, whole or as a streamed delta, and its logprobs."""

    object: str
    chunk_object: str
    id_prefix: str
    # (index, text, reasoning, finish_reason, logprobs, tool calls) -> a choice, whole or as a delta; the calls
    # are a whole choice's ToolCalls, or a delta's tool_calls entries (only chat has any)
    choice: Callable[[int, str, str, str | None, dict | None, tuple[ToolCall, ...]], dict[str, Any]]
    delta: Callable[[int, str, str, str | None, dict | None, list[dict]], dict[str, Any]]
    opening_delta: Callable[[int], dict[str, Any]] | None  # chat streams announce the role first
    logprobs: Callable[[int], Formatter]  # a choice's formatter, given the characters before its first token


CHAT = Shape(
    object="chat.completion",
    chunk_object="chat.completion.chunk",
    id_prefix="chatcmpl-",
    choice=lambda index, text, reasoning, finish, logprobs, calls: {
        "index": index, "message": {"role": "assistant", "content": text if text or not calls else None,
                                    **({"reasoning_content": reasoning} if reasoning else {}),
                                    **({"tool_calls": [_call_json(call) for call in calls]} if calls else {})},
        "logprobs": logprobs, "finish_reason": finish},
    delta=lambda index, text, reasoning, finish, logprobs, calls: {
        "index": index, "delta": {**({"reasoning_content": reasoning} if reasoning else {}),
                                  **({"content": text} if text else {}), **({"tool_calls": calls} if calls else {})},
        "logprobs": logprobs, "finish_reason": finish},
    opening_delta=lambda index: {
        "index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None},
    logprobs=lambda offset: chat_logprobs,
)

_completion_choice = lambda index, text, _reasoning, finish, logprobs, _calls: {  # noqa: E731
    "index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
COMPLETION = Shape(
    object="text_completion",
    chunk_object="text_completion",
    id_prefix="cmpl-",
    choice=_completion_choice,
    delta=_completion_choice,
    opening_delta=None,
    logprobs=lambda offset: CompletionLogprobs(offset).format,
)


def _usage(choices: list[Finished]) -> dict[str, Any]:
    """The prompt is prefilled once for all choices; each choice's tokens count."""
    prompt, completion = choices[0].prompt_tokens, sum(f.completion_tokens for f in choices)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": choices[0].cached_tokens},
    }


def _failure(finished: Finished) -> dict[str, Any]:
    code = OPENAI_FAILURE_CODES[finished.reason]
    return {"error": {"message": finished.message or code, "type": "server_error", "param": None, "code": code}}


def _call_json(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _call_deltas(call: ToolCall) -> list[list[dict[str, Any]]]:
    """OpenAI's streamed form of a whole call: each item is one chunk's delta.tool_calls, first the index, id, type
    and name (arguments ""), then the arguments."""
    return [[{"index": call.index, "id": call.id, "type": "function",
              "function": {"name": call.name, "arguments": ""}}],
            [{"index": call.index, "function": {"arguments": call.arguments}}]]


async def _collect(handle: TrackedHandle) -> tuple[str, tuple[TokenLogprob, ...], PromptLogprobs | None]:
    """A whole choice's text, its logprob entries, and its prompt's scores (when asked)."""
    texts, prompt = [], None
    entries: list[TokenLogprob] = []
    async for event in handle:
        if isinstance(event, TokenEvent):
            texts.append(event.text)
            entries.extend(event.logprobs)
        elif isinstance(event, PromptLogprobs):
            prompt = event
    return "".join(texts), tuple(entries), prompt


def _finish_reason(finished: Finished, answer: Answer) -> str:
    """OpenAI's: "tool_calls" when the model ended its answer after calling tools."""
    called = answer.called and finished.reason in (FinishReason.EOS, FinishReason.STOP)
    return "tool_calls" if called else _FINISH_REASONS[finished.reason]


async def _send_release(response: web.StreamResponse, chunk: dict[str, Any], shape: Shape, index: int,
                        release: Release, logprobs: dict | None = None) -> None:
    """A choice's newly released text (with its reasoning and logprobs), then its new calls, as deltas."""
    if release.text or release.reasoning or logprobs is not None:
        delta = shape.delta(index, release.text, release.reasoning, None, logprobs, [])
        await sse.send(response, {**chunk, "choices": [delta]})
    for call in release.calls:
        for part in _call_deltas(call):
            await sse.send(response, {**chunk, "choices": [shape.delta(index, "", "", None, None, part)]})


async def _respond(request: web.Request, worker: WorkerState, shape: Shape, model: str, generation: Generation,
                   prepared: Prepared, echo: str) -> web.StreamResponse:
    """`model`: the served model or LoRA adapter the request named; `echo`: text that leads every choice (a
    completion's prompt, when asked for)."""
    header = {"id": shape.id_prefix + uuid.uuid4().hex, "created": int(time.time()), "model": model}
    choices = prepared.requests
    wants_logprobs = generation.logprobs is not None
    # An echoed prompt that is scored: its logprobs lead the choice's (completions only; echo has n == 1).
    scorer = CompletionLogprobs(0) if generation.scores_prompt else None
    formats = [scorer.format if scorer else shape.logprobs(len(echo)) for _ in choices]
    answers = [prepared.answers(generation.stream) for _ in choices]

    def whole_logprobs(index: int, entries: tuple[TokenLogprob, ...], scored: PromptLogprobs | None) -> dict | None:
        if not wants_logprobs:
            return None
        leading = None
        if scorer:  # first: the prompt's offsets come first
            assert scored is not None  # a scored prompt's scores come before its answer
            leading = scorer.prompt(scored)
        answer = formats[index](entries)
        return joined(leading, answer) if leading else answer

    async with generating(worker, prepared) as handles:
        if not generation.stream:
            outputs = await asyncio.gather(*(_collect(handle) for handle in handles))
            finished = [handle.ended for handle in handles]
            if failed := next((f for f in finished if f.reason not in _FINISH_REASONS), None):
                return web.json_response(_failure(failed), status=FAILED_STATUS[failed.reason])
            releases = [answer.feed(text) + answer.finish(cut=f.reason is FinishReason.LENGTH)
                        for answer, (text, _, _), f in zip(answers, outputs, finished)]
            return web.json_response({
                **header, "object": shape.object,
                "choices": [shape.choice(index, echo + release.text, release.reasoning,
                                         _finish_reason(f, answers[index]), whole_logprobs(index, *output[1:]),
                                         release.calls)
                            for index, (output, f, release) in enumerate(zip(outputs, finished, releases))],
                "usage": _usage(finished),
            })
        chunk = {**header, "object": shape.chunk_object}
        response = await sse.open_stream(request)
        for index in range(len(handles)):
            if shape.opening_delta:
                await sse.send(response, {**chunk, "choices": [shape.opening_delta(index)]})
            if echo and not scorer:  # a scored prompt is sent with its scores, once it is prefilled
                await sse.send(response, {**chunk, "choices": [shape.delta(index, echo, "", None, None, [])]})
        async for index, event in merged(handles):
            if isinstance(event, PromptLogprobs):
                assert scorer is not None  # the prompt's scores come only when asked for (scores_prompt)
                scores = scorer.prompt(event)
                await sse.send(response, {**chunk, "choices": [shape.delta(index, echo, "", None, scores, [])]})
            elif isinstance(event, TokenEvent):
                logprobs = formats[index](event.logprobs) if wants_logprobs else None
                await _send_release(response, chunk, shape, index, answers[index].feed(event.text), logprobs)
            elif isinstance(event, Finished) and event.reason in _FINISH_REASONS:
                await _send_release(response, chunk, shape, index,
                                    answers[index].finish(cut=event.reason is FinishReason.LENGTH))
                finish = _finish_reason(event, answers[index])
                await sse.send(response, {**chunk, "choices": [shape.delta(index, "", "", finish, None, [])]})
            elif isinstance(event, Finished):
                await sse.send(response, _failure(event))
                break  # leaving `generating` ends the other choices too
        if generation.include_usage and all(handle.finished for handle in handles):
            await sse.send(response, {**chunk, "choices": [], "usage": _usage([h.ended for h in handles])})
        await response.write(sse.DONE)
        return response


def _generation_route(path: str, parse: Callable[[dict[str, Any], WorkerState, ServedModel], Any], shape: Shape,
                      prepared: Callable[[WorkerState, Any, str, str], Awaitable[Prepared]]) -> None:
    """Chat and completions differ only in how they parse, what their prompt is and how they shape the answer; the
    rest is shared."""

    async def handler(request: web.Request) -> web.StreamResponse:
        worker = request.app[WORKER]
        served = worker.require_served()
        parsed = parse(parse_json_object(await request.read()), worker, served)
        model = served_model(worker, parsed.model)
        ready = await prepared(worker, parsed, request["request_id"], model)
        echo = _echo(served, parsed) if parsed.generation.echo else ""
        return await _respond(request, worker, shape, model, parsed.generation, ready, echo)

    routes.post(path)(handler)


def _options(worker: WorkerState, served: ServedModel) -> dict[str, Any]:
    """What both parsers are told of the worker: its slots and its adapters."""
    return {"max_choices": worker.settings.engine.parallel, "loras": len(served.facts.loras)}


def _read_chat(body: dict[str, Any], worker: WorkerState, served: ServedModel) -> ChatRequest:
    return parse_chat(body, served.facts.n_vocab, worker.sampling, **_options(worker, served),
                      intake=worker.intake(served))


def _read_completion(body: dict[str, Any], worker: WorkerState, served: ServedModel) -> CompletionRequest:
    return parse_completion(body, served.facts.n_vocab, worker.sampling, **_options(worker, served))


async def _completion(worker: WorkerState, completion: CompletionRequest, request_id: str, model: str) -> Prepared:
    """A completion's prompt is text or token ids, or with a suffix a fill-in-the-middle prompt."""
    prompt = completion.prompt
    given: Prompt = prompt if isinstance(prompt, str) else tuple(prompt)
    if completion.suffix is not None:
        assert isinstance(prompt, str)  # parse_completion refuses token ids beside a suffix
        given = Infill(prompt, completion.suffix, field="suffix")
    return await prepare(worker, generation_input(worker, completion.generation, given, request_id, model, "prompt"))


def _echo(served: ServedModel, completion: CompletionRequest) -> str:
    """The prompt as text: as sent, or its token ids' text."""
    prompt = completion.prompt
    return prompt if isinstance(prompt, str) else served.prompts.detokenize(prompt).decode("utf-8", errors="replace")


_generation_route("/v1/chat/completions", _read_chat, CHAT, prepare_chat)
_generation_route("/v1/completions", _read_completion, COMPLETION, _completion)


@routes.get("/v1/models")
async def models(request: web.Request) -> web.Response:
    """The served model, then its LoRA adapters as vLLM lists them: a request's `model` may name either."""
    worker = request.app[WORKER]
    # What a prompt may hold (text, image), as llama-server says it; known once the model (and projector) loaded.
    modalities = {"input_modalities": list(worker.served.prompts.input_modalities)} if worker.served is not None else {}
    entry = {"object": "model", "created": 0, "owned_by": "llm-worker"}
    return web.json_response({"object": "list", "data": [
        {"id": worker.model_id, **entry, **modalities},
        *({"id": lora.name, **entry, "parent": worker.model_id, "root": str(lora.path)}
          for lora in worker.adapters.loras),
    ]})
