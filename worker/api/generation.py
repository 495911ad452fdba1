"""Submit one generation, log and measure its outcome once, cancel it if the client goes away."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import AsyncIterator

import structlog

from worker.api.metrics import Metrics
from worker.api.schemas import Generation
from worker.api.state import WorkerState
from worker.engine import Event, Finished, Request, RequestHandle, TokenEvent

log = structlog.get_logger("worker.request")


def engine_request(worker: WorkerState, prompt_tokens: list[int], generation: Generation, request_id: str) -> Request:
    engine = worker.require_engine()
    # No max_tokens: generate up to the end of this sequence's context.
    max_tokens = generation.max_tokens or max(1, engine.n_ctx_seq - len(prompt_tokens))
    return Request(prompt_tokens, max_tokens, generation.sampling, generation.stop, request_id,
                   timeout_s=worker.settings.request_timeout)


class TrackedHandle:
    """A RequestHandle as the routes see it: the same events, with the gaps between pieces measured."""

    def __init__(self, handle: RequestHandle, metrics: Metrics) -> None:
        self._handle = handle
        self._metrics = metrics

    @property
    def finished(self) -> Finished | None:
        return self._handle.finished

    def cancel(self) -> None:
        self._handle.cancel()

    async def __aiter__(self) -> AsyncIterator[Event]:
        last = None
        async for event in self._handle:
            if isinstance(event, TokenEvent):
                now = time.monotonic()
                if last is not None:
                    self._metrics.inter_token.observe(now - last)
                last = now
            yield event


def _log_outcome(finished: Finished | None, e2e_s: float) -> None:
    if finished is None:
        log.info("request_done", finish_reason="client_disconnected", e2e_ms=round(e2e_s * 1e3, 1))
        return
    decode_tps = finished.decode_tokens_per_s
    log.info(
        "request_done",
        finish_reason=finished.reason.value,
        prompt_tokens=finished.prompt_tokens,
        cached_tokens=finished.cached_tokens,
        completion_tokens=finished.completion_tokens,
        queue_ms=round(finished.queue_s * 1e3, 1),
        ttft_ms=round(finished.ttft_s * 1e3, 1),
        tokens_per_s=round(decode_tps, 1) if decode_tps else None,
        e2e_ms=round(e2e_s * 1e3, 1),
        message=finished.message or None,
    )


@asynccontextmanager
async def generating(worker: WorkerState, request: Request) -> AsyncIterator[TrackedHandle]:
    """Raises the engine's up-front refusals (context, queue) before yielding."""
    started = time.monotonic()
    handle = worker.require_engine().submit(request)
    try:
        yield TrackedHandle(handle, worker.metrics)
    finally:
        # A handler cancelled by a client disconnect lands here mid-stream: free the slot now.
        handle.cancel()
        e2e_s = time.monotonic() - started
        worker.metrics.finished(handle.finished, e2e_s)
        _log_outcome(handle.finished, e2e_s)
