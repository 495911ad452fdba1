"""Failures before a response starts -> one JSON error, in each route family's own shape.

OpenAI routes answer {"error": {message, type, param, code, errors}}; the
pool-manager routes answer the contract's {"errors": [{field, constraint, message, value}]}.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aiohttp import web

from worker.api.problems import InvalidRequest, Problem
from worker.api.state import NotReady
from worker.engine import ChatTemplateError, ContextLengthExceeded, EmptyPrompt, NoChatTemplate, QueueFull

RETRY_AFTER_S = "1"


class Family(str, enum.Enum):
    OPENAI = "openai"
    ORCH = "orch"


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


def classify(exc: Exception) -> Failure | None:
    """The HTTP meaning of an exception raised before any byte of the answer was sent."""
    if isinstance(exc, InvalidRequest):
        return Failure(400, exc.code, exc.problems)
    if isinstance(exc, ContextLengthExceeded):
        constraint = f"prompt tokens + max_tokens <= {exc.n_ctx_seq}"
        return Failure(400, "context_length_exceeded", [Problem("prompt", constraint, str(exc), exc.prompt_tokens)])
    if isinstance(exc, EmptyPrompt):
        return Failure(400, "invalid_request", [Problem("prompt", "at least one token", str(exc))])
    if isinstance(exc, (NoChatTemplate, ChatTemplateError)):
        return Failure(400, "chat_template", [Problem("messages", "the model's chat template", str(exc))])
    if isinstance(exc, UnknownModel):
        return Failure(400, "model_not_found", [Problem("model", "the served model", str(exc))])
    if isinstance(exc, QueueFull):
        return Failure(503, "queue_full", [Problem("queue", "--max-queue", f"the queue is full: {exc}; retry later")], True)
    if isinstance(exc, NotReady):
        return Failure(503, "not_ready", [Problem("worker", "ready", f"{exc}; retry later")], True)
    return None


def openai_body(failure: Failure) -> dict:
    kind = "invalid_request_error" if failure.status < 500 else "server_error"
    return {"error": {
        "message": failure.message,
        "type": kind,
        "param": failure.problems[0].field if failure.problems else None,
        "code": failure.code,
        "errors": [p.as_dict() for p in failure.problems],
    }}


def orch_body(failure: Failure) -> dict:
    return {"errors": [{**p.as_dict(), "code": failure.code} for p in failure.problems]}


def response(failure: Failure, family: Family) -> web.Response:
    body = openai_body(failure) if family is Family.OPENAI else orch_body(failure)
    headers = {"Retry-After": RETRY_AFTER_S} if failure.retry else None
    return web.json_response(body, status=failure.status, headers=headers)


def family_of(request: web.Request) -> Family:
    path = request.path
    return Family.OPENAI if path.startswith(("/v1/chat", "/v1/completions", "/v1/models")) else Family.ORCH


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except Exception as exc:
        failure = classify(exc)
        if failure is None:
            raise
        return response(failure, family_of(request))
