"""Failures before a response starts -> one JSON error, in each route family's own shape: OpenAI's {"error": {...}}
(llama-server's token routes too), the pool-manager contract's {"errors": [...]}, Anthropic's {"type": "error", ...},
Ollama's {"error": "..."}.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from worker.api.problems import Problem
from worker.api.state import NotReady
from worker.engine import EmbeddingFailed, FinishReason, QueueFull, Refused

RETRY_AFTER_S = "1"
# A generation that ended in failure, as every dialect answers it when nothing was sent yet: the HTTP status, and
# OpenAI's error code (the OpenAI routes and the Responses API; Anthropic names its own error types).
FAILED_STATUS = {FinishReason.CANCELLED: 503, FinishReason.TIMEOUT: 504, FinishReason.ERROR: 500}
OPENAI_FAILURE_CODES = {FinishReason.CANCELLED: "cancelled", FinishReason.TIMEOUT: "timeout",
                        FinishReason.ERROR: "inference_failed"}


class Family(str, enum.Enum):
    OPENAI = "openai"
    ORCH = "orch"
    ANTHROPIC = "anthropic"
    OLLAMA = "ollama"


class UnknownModel(Exception):
    pass


@dataclass(frozen=True)
class Failure:
    status: int
    code: str
    problems: list[Problem]
    retry: bool = False

    @property
    def message(self) -> str:
        return "; ".join(p.message for p in self.problems)


class FailedJob(Exception):
    """A job that failed in the engine before anything was sent (pooled_failure's): answered in the route's shape."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def classify(exc: Exception) -> Failure | None:
    """The HTTP meaning of an exception raised before any byte of the answer was sent."""
    if isinstance(exc, FailedJob):
        return exc.failure
    if isinstance(exc, Refused):  # the request's problems (InvalidRequest), or the served model's refusal of its input
        return Failure(400, exc.code, exc.problems)
    if isinstance(exc, UnknownModel):
        # 404, as OpenAI answers a model it does not have: the body is valid, the model is missing.
        return Failure(404, "model_not_found", [Problem("model", "the served model", str(exc))])
    if isinstance(exc, QueueFull):
        return queue_full(exc)
    if isinstance(exc, web.HTTPRequestEntityTooLarge):  # raised by request.read(): said in the route's shape too
        return Failure(413, "body_too_large", [Problem("body", "the size limit", f"the body is too large: {exc.text}")])
    if isinstance(exc, NotReady):
        return Failure(503, "not_ready", [Problem("worker", "ready", f"{exc}; retry later")], True)
    return None


def queue_full(exc: QueueFull) -> Failure:
    full = Problem("queue", "--max-queue", f"the queue is full: {exc}; retry later")
    return Failure(503, "queue_full", [full], True)


def pooled_failure(exc: EmbeddingFailed | asyncio.TimeoutError, timeout_s: float | None) -> Failure:
    """An embedding or rerank job that got nothing, in the chat routes' codes: cancelled (503, the worker is
    stopping), timeout (504), inference_failed (500)."""
    if isinstance(exc, asyncio.TimeoutError):
        return Failure(504, "timeout", [Problem("request", "--request-timeout",
                                                f"the request ran past its {timeout_s:g} s timeout")])
    if exc.stopped:
        return Failure(503, "cancelled", [Problem("worker", "running", str(exc))], retry=True)
    return Failure(500, "inference_failed", [Problem("engine", "llama_decode", str(exc))])


# OpenAI routes and llama-server's token routes: {"error": {message, type, param, code, errors}}.
def openai_body(failure: Failure) -> dict:
    kind = "invalid_request_error" if failure.status < 500 else "server_error"
    return {"error": {
        "message": failure.message,
        "type": kind,
        "param": failure.problems[0].field if failure.problems else None,
        "code": failure.code,
        "errors": [p.as_dict() for p in failure.problems],
    }}


# The pool-manager contract: {"errors": [{field, constraint, message, value}]}, each with the code.
def orch_body(failure: Failure) -> dict:
    return {"errors": [{**p.as_dict(), "code": failure.code} for p in failure.problems]}


def anthropic_error(kind: str, code: str, message: str, problems: list[Problem] | None = None) -> dict:
    """Anthropic's error shape, with the worker's own code beside its type (as the OpenAI routes name it),
    and each problem apart in `errors`, as the OpenAI routes list them."""
    listed = {"errors": [p.as_dict() for p in problems]} if problems else {}
    return {"type": "error", "error": {"type": kind, "code": code, "message": message, **listed}}


_ANTHROPIC_TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "request_too_large",
                    503: "overloaded_error"}


def anthropic_body(failure: Failure) -> dict:
    # One message carries every problem, each named by its field unless it names itself.
    listing = "; ".join(p.message if p.message.startswith(p.field) else f"{p.field}: {p.message}"
                        for p in failure.problems)
    return anthropic_error(_ANTHROPIC_TYPES.get(failure.status, "api_error"), failure.code, listing, failure.problems)


def ollama_body(failure: Failure) -> dict:
    """Ollama's clients read one string, `error`; each problem apart follows, as the OpenAI routes list them."""
    return {"error": failure.message, "code": failure.code, "errors": [p.as_dict() for p in failure.problems]}


_BODIES = {Family.OPENAI: openai_body, Family.ORCH: orch_body, Family.ANTHROPIC: anthropic_body,
           Family.OLLAMA: ollama_body}


def response(failure: Failure, family: Family) -> web.Response:
    headers = {"Retry-After": RETRY_AFTER_S} if failure.retry else None
    return web.json_response(_BODIES[family](failure), status=failure.status, headers=headers)


_OPENAI_PATHS = ("/v1/chat", "/v1/completions", "/v1/responses", "/v1/models", "/v1/embeddings", "/tokenize",
                 "/detokenize", "/apply-template", "/lora-adapters", "/v1/rerank", "/rerank", "/slots", "/infill",
                 "/props")


def family_of(request: web.Request) -> Family:
    if request.path.startswith("/v1/messages"):
        return Family.ANTHROPIC
    if request.path.startswith("/api/"):
        return Family.OLLAMA
    return Family.OPENAI if request.path.startswith(_OPENAI_PATHS) else Family.ORCH


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Exception as exc:
        failure = classify(exc)
        if failure is None:
            raise
        return response(failure, family_of(request))
