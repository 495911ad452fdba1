"""Submit one generation, log and measure its outcome once, cancel it if the client goes away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog

from worker.api.chat_input import as_chat, chat_images
from worker.api.generation_fields import ChatRequest, Generation
from worker.api.metrics import Metrics
from worker.api.state import WorkerState
from worker.engine import Event, Finished, GenerationInput, Media, Prepared, Prompt, RequestHandle, TokenEvent

log = structlog.get_logger("worker.request")


def generation_input(worker: WorkerState, generation: Generation, prompt: Prompt, request_id: str, model: str | None,
                     prompt_field: str, images: tuple[Media, ...] = ()) -> GenerationInput:
    """A request read by its dialect, in the engine's terms. `model`: the name the request gave, which may be a LoRA
    adapter's (api/adapters.py); `prompt_field`: the request's field that holds the prompt."""
    adapters = worker.adapters.resolve(generation.lora, model)
    return GenerationInput(prompt, generation.sampling, generation.stop, generation.max_tokens, generation.n,
                           generation.logprobs, generation.scores_prompt, adapters, images, request_id,
                           worker.settings.request_timeout, prompt_field, generation.grammar_field)


async def prepare(worker: WorkerState, given: GenerationInput) -> Prepared:
    """The served model's requests for `given` (ServedModel.prepare), on a worker thread where it has images:
    decoding them (stb_image) and resizing them (mtmd) would otherwise hold the event loop, and with it every running
    stream's next piece. libmtmd's decoding and tokenizing may run beside the engine thread's encoding, as
    llama-server runs them on its HTTP threads."""
    served = worker.require_served()
    if given.images:
        return await asyncio.to_thread(served.prepare, given)
    return served.prepare(given)


async def prepare_chat(worker: WorkerState, chat: ChatRequest, request_id: str, model: str | None) -> Prepared:
    """A chat request made ready: its image links read, then prepared by the served model."""
    images = await chat_images(chat, worker.settings.media)
    return await prepare(worker, generation_input(worker, chat.generation, as_chat(chat), request_id, model,
                                                  chat.prompt_field, images))


class TrackedHandle:
    """A RequestHandle as the routes see it: the same events, with the gaps between pieces measured, and the
    request counted and logged once, as its Finished event passes: before the route writes the response's end, so
    a client that reads /metrics or the log right after it finds the request there."""

    def __init__(self, handle: RequestHandle, metrics: Metrics, started: float) -> None:
        self._handle = handle
        self._metrics = metrics
        self._started = started
        self._recorded = False

    def record(self) -> None:
        """Count and log the outcome, once (a route left without its Finished event: when it leaves)."""
        if self._recorded:
            return
        self._recorded = True
        e2e_s = time.monotonic() - self._started
        self._metrics.finished(self._handle.finished, e2e_s)
        _log_outcome(self._handle.finished, e2e_s)

    @property
    def finished(self) -> Finished | None:
        return self._handle.finished

    @property
    def ended(self) -> Finished:
        """The Finished event, for a route that read the events to the end (the last of them is this one)."""
        finished = self._handle.finished
        if finished is None:
            raise RuntimeError("the request's events were not read to the end")
        return finished

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
            elif isinstance(event, Finished):
                self.record()
            yield event


async def merged(handles: list[TrackedHandle]) -> AsyncIterator[tuple[int, Event]]:
    """Every choice's events as they come, each with its choice's index; ends when all have finished."""
    if len(handles) == 1:  # the common case, without a task per choice
        async for event in handles[0]:
            yield 0, event
        return
    queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()

    async def pump(index: int, handle: TrackedHandle) -> None:
        async for event in handle:
            queue.put_nowait((index, event))

    pumps = [asyncio.create_task(pump(index, handle)) for index, handle in enumerate(handles)]
    try:
        running = len(handles)
        while running:
            index, event = await queue.get()
            running -= isinstance(event, Finished)
            yield index, event
    finally:
        for task in pumps:
            task.cancel()


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
        draft_tokens=finished.draft_tokens,
        draft_accepted=finished.draft_accepted,
        e2e_ms=round(e2e_s * 1e3, 1),
        message=finished.message or None,
    )


@asynccontextmanager
async def generating(worker: WorkerState, prepared: Prepared) -> AsyncIterator[list[TrackedHandle]]:
    """The prepared request's choices submitted, a handle each; raises the engine's up-front refusal (a full queue)
    before yielding."""
    started = time.monotonic()
    handles = [TrackedHandle(handle, worker.metrics, started)
               for handle in worker.require_served().engine.submit_choices(prepared.requests)]
    try:
        yield handles
    finally:
        for handle in handles:
            # A handler cancelled by a client disconnect lands here mid-stream: free the slots now.
            handle.cancel()
            handle.record()
