"""One answer in Ollama's shape: each piece as a chunk of the NDJSON stream ({"message": {...}, "done": false} for
chat, {"response": ...} for generate), or gathered into one object; the last carries done_reason and the timings in
nanoseconds, as Ollama's clients read them."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from worker.engine import Finished, FinishReason, TokenLogprob
from worker.engine import ToolCall as Call

DONE_REASONS = {FinishReason.EOS: "stop", FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}
NDJSON = "application/x-ndjson"
_NS = 1_000_000_000


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _token(piece: bytes, logprob: float) -> dict[str, Any]:
    return {"token": piece.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(piece)}


def logprob_entries(entries: tuple[TokenLogprob, ...], top: int) -> list[dict[str, Any]]:
    return [{**_token(e.piece, e.logprob),
             **({"top_logprobs": [_token(a.piece, a.logprob) for a in e.top[:top]]} if top else {})}
            for e in entries]


def _call(call: Call) -> dict[str, Any]:
    """Ollama's arguments are an object, not OpenAI's JSON text."""
    return {"id": call.id, "function": {"index": call.index, "name": call.name,
                                        "arguments": json.loads(call.arguments)}}


def timings(finished: Finished, total_s: float) -> dict[str, int]:
    """Ollama's counts and durations; the model is loaded before any request, so loading takes none of it."""
    return {"total_duration": int(total_s * _NS), "load_duration": 0,
            "prompt_eval_count": finished.prompt_tokens,
            "prompt_eval_duration": int(max(0.0, finished.ttft_s - finished.queue_s) * _NS),
            "eval_count": finished.completion_tokens, "eval_duration": int(finished.decode_s * _NS)}


class Reply:
    """`chat`: pieces go in a message (text, thinking, tool calls); else in `response` and `thinking`."""

    def __init__(self, model: str, chat: bool, top_logprobs: int | None) -> None:
        self._model, self._chat, self._top = model, chat, top_logprobs
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[dict[str, Any]] = []
        self._logprobs: list[dict[str, Any]] = []

    def piece(self, text: str, thinking: str = "", calls: tuple[Call, ...] = (),
              logprobs: tuple[TokenLogprob, ...] = ()) -> dict[str, Any] | None:
        """A streamed chunk of these pieces (None when there is nothing to send); kept for the whole answer too."""
        entries = logprob_entries(logprobs, self._top) if self._top is not None else []
        shaped = [_call(call) for call in calls]
        self._text.append(text)
        self._thinking.append(thinking)
        self._calls += shaped
        self._logprobs += entries
        if not (text or thinking or shaped or entries):
            return None
        return self._body(text, thinking, shaped, entries, done=False)

    def last(self, finished: Finished, total_s: float, whole: bool) -> dict[str, Any]:
        """The closing object: done, why, the timings; `whole`: with the answer (not streamed)."""
        if whole:
            body = self._body("".join(self._text), "".join(self._thinking), self._calls, self._logprobs, done=True)
        else:
            body = self._body("", "", [], [], done=True)
        return {**body, "done_reason": DONE_REASONS[finished.reason], **timings(finished, total_s)}

    def loaded(self) -> dict[str, Any]:
        """The answer to a request with nothing to generate: Ollama's way to load a model, which is loaded."""
        return {**self._body("", "", [], [], done=True), "done_reason": "load"}

    def _body(self, text: str, thinking: str, calls: list[dict[str, Any]], logprobs: list[dict[str, Any]],
              done: bool) -> dict[str, Any]:
        thought = {"thinking": thinking} if thinking else {}
        if self._chat:
            message = {"role": "assistant", "content": text, **thought, **({"tool_calls": calls} if calls else {})}
            answer: dict[str, Any] = {"message": message}
        else:
            answer = {"response": text, **thought}
        return {"model": self._model, "created_at": now(), **answer, "done": done,
                **({"logprobs": logprobs} if logprobs else {})}


async def open_ndjson(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no", "X-Request-Id": request["request_id"]})
    await response.prepare(request)
    return response


async def send_line(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
