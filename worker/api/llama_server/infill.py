"""llama-server's POST /infill: code completion at a cursor, the text before it (input_prefix) and after it
(input_suffix), other files (input_extra) and the middle's start (prompt), laid out around the model's
fill-in-the-middle tokens (worker/engine/serving/infill.py). The other fields are a completion's; the answer is
llama-server's own completion shape, whole or streamed as its `data:` lines."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from aiohttp import web

from worker.api import sse
from worker.api.error_shapes import FAILED_STATUS
from worker.api.generation import TrackedHandle, generating, generation_input, prepare
from worker.api.openai.request import CompletionRequest, parse_completion
from worker.api.problems import InvalidRequest, Reader, parse_json_object
from worker.api.request_checks import served_model
from worker.api.state import WORKER
from worker.engine import ExtraFile, Finished, FinishReason, Infill, TokenEvent

routes = web.RouteTableDef()

# Its own fields; the rest are read as a completion's. n_predict is llama-server's max_tokens.
_OWN = ("input_prefix", "input_suffix", "input_extra", "prompt", "n_predict")
_STOP_TYPES = {FinishReason.EOS: "eos", FinishReason.STOP: "word", FinishReason.LENGTH: "limit"}


def _extra(r: Reader) -> tuple[ExtraFile, ...]:
    raw = r.body.get("input_extra")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        r.problem("input_extra", "a list of {filename, text}", "input_extra must be a list of {\"filename\": ..., "
                  "\"text\": ...}", raw)
        return ()
    files = []
    for i, chunk in enumerate(raw):
        nested = Reader(chunk if isinstance(chunk, dict) else {})
        text, filename = nested.string("text", required=True), nested.string("filename", "tmp")
        if not isinstance(chunk, dict):
            r.problem(f"input_extra[{i}]", "{filename, text}", f"input_extra[{i}] must be an object", chunk)
        for problem in nested.problems:
            r.problem(f"input_extra[{i}].{problem.field}", problem.constraint, f"input_extra[{i}].{problem.message}",
                      problem.value)
        if isinstance(text, str) and isinstance(filename, str):
            files.append(ExtraFile(filename, text))
    return tuple(files)


def parse_infill(body: dict[str, Any], completion: Any) -> tuple[str, str, tuple[ExtraFile, ...], str,
                                                                  CompletionRequest]:
    """(prefix, suffix, extra files, the middle's start, the completion the rest of the body is), every problem of
    both listed; `completion`: parse_completion with the worker's options."""
    r = Reader(body)
    prefix, suffix = r.string("input_prefix", required=True), r.string("input_suffix", required=True)
    prompt, extra = r.string("prompt", ""), _extra(r)
    rest = {key: value for key, value in body.items() if key not in _OWN}
    if body.get("n_predict") is not None:
        rest["max_tokens"] = body["n_predict"]
    parsed = None
    try:
        parsed = completion({**rest, "prompt": prefix if isinstance(prefix, str) and prefix else " "})
    except InvalidRequest as refused:
        # n_predict's problems are read as max_tokens's: named back by the field the client sent
        sent = "n_predict" if body.get("n_predict") is not None else "max_tokens"
        r.problems += [replace(p, field=sent, constraint=p.constraint.replace("max_tokens", sent),
                               message=p.message.replace("max_tokens", sent))
                       if p.field == "max_tokens" else p for p in refused.problems if p.field != "prompt"]
    if r.problems or parsed is None:
        raise InvalidRequest(r.problems)
    assert isinstance(prefix, str) and isinstance(suffix, str) and isinstance(prompt, str)  # else r had problems
    return prefix, suffix, extra, prompt, parsed


@routes.post("/infill")
async def infill(request: web.Request) -> web.StreamResponse:
    worker = request.app[WORKER]
    served = worker.require_served()
    prefix, suffix, extra, middle, completion = parse_infill(
        parse_json_object(await request.read()),
        lambda body: parse_completion(body, served.facts.n_vocab, worker.sampling, 1, len(served.facts.loras)))
    model = served_model(worker, completion.model)
    infill = Infill(prefix, suffix, extra, middle)
    prepared = await prepare(worker, generation_input(worker, completion.generation, infill, request["request_id"],
                                                      model, "input_prefix"))
    prompt_text = served.prompts.detokenize(prepared.requests[0].prompt_tokens).decode("utf-8", errors="replace")
    async with generating(worker, prepared) as (handle,):
        if not completion.generation.stream:
            texts = [event.text async for event in handle if isinstance(event, TokenEvent)]
            finished = handle.ended
            if finished.reason not in _STOP_TYPES:
                return web.json_response(_failure(finished), status=FAILED_STATUS[finished.reason])
            return web.json_response(_whole("".join(texts), finished, model, prompt_text))
        response = await sse.open_stream(request)
        await _stream(response, handle, model, prompt_text)
        return response


async def _stream(response: web.StreamResponse, handle: TrackedHandle, model: str, prompt_text: str) -> None:
    texts = []
    async for event in handle:
        if isinstance(event, TokenEvent):
            texts.append(event.text)
            await sse.send(response, {"index": 0, "content": event.text, "tokens": [], "stop": False, "id_slot": -1})
    finished = handle.ended
    if finished.reason not in _STOP_TYPES:
        await sse.send(response, _failure(finished))
        return
    await sse.send(response, {**_whole("", finished, model, prompt_text), "content": ""})


def _whole(text: str, finished: Finished, model: str, prompt_text: str) -> dict[str, Any]:
    """llama-server's completion result: the text, why it stopped, and its counts and timings."""
    decode_ms = finished.decode_s * 1e3
    return {"index": 0, "content": text, "tokens": [], "id_slot": -1, "stop": True, "model": model,
            "tokens_predicted": finished.completion_tokens, "tokens_evaluated": finished.prompt_tokens,
            "prompt": prompt_text, "has_new_line": "\n" in text, "truncated": False,
            "stop_type": _STOP_TYPES[finished.reason], "stopping_word": finished.stop_sequence or "",
            "tokens_cached": finished.cached_tokens,
            "timings": {"prompt_n": finished.prompt_tokens - finished.cached_tokens,
                        "prompt_ms": round(finished.ttft_s * 1e3, 3), "predicted_n": finished.completion_tokens,
                        "predicted_ms": round(decode_ms, 3),
                        "predicted_per_second": (finished.completion_tokens - 1) / finished.decode_s
                        if finished.decode_s > 0 else None},
            "created": int(time.time())}


def _failure(finished: Finished) -> dict[str, Any]:
    return {"error": {"code": FAILED_STATUS[finished.reason], "message": finished.message or finished.reason.value,
                      "type": "server_error"}}
