"""The contract between the event loop and the engine thread: requests in and their events out, pooled jobs and
work on slots' cells run between steps. The thread owns the llama context; nothing else decodes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TypeVar

from worker.engine.core.loop import EngineLoop
from worker.engine.core.scheduler import SchedulerStats
from worker.engine.core.step_update import Events
from worker.engine.errors import ContextLengthExceeded, EmptyPrompt
from worker.engine.handle import RequestHandle
from worker.engine.handoff import Handoff
from worker.engine.kv.cell_transfer import CellTransfer
from worker.engine.kv.held_cells import HeldCells
from worker.engine.kv.prefix_cache import PrefixCache
from worker.engine.native.model import LlamaModel
from worker.engine.native.projector import Projector
from worker.engine.pooling.embeddings import EmbeddingJob, Outcome, Vector
from worker.engine.requests import Request
from worker.engine.sequence import Sequence

T = TypeVar("T")


class Engine:
    def __init__(self, model: LlamaModel, loop: asyncio.AbstractEventLoop, projector: Projector | None = None) -> None:
        self.model = model
        self.projector = projector  # None: text only (no --mmproj)
        self._loop = loop
        self._events = Handoff(loop, self._deliver)  # each step's generation events, engine thread -> loop
        self.steps = EngineLoop(model, model.config.prefix_cache, self._events.post, projector)
        self._thread = threading.Thread(target=self._run, name="llm-engine", daemon=True)
        self._warm_up: Callable[[], None] = lambda: None
        self._warm = threading.Event()
        self._warm_up_error: BaseException | None = None

    def start(self, warm_up: Callable[[], T]) -> T:
        """Start the engine thread, which runs `warm_up` before any request, and wait for it: warm_up's result, or
        its exception (the model is closed then)."""
        warmed: list[T] = []
        self._warm_up = lambda: warmed.append(warm_up())
        self._thread.start()
        self._warm.wait()
        if self._warm_up_error is not None:
            self.model.close()
            raise self._warm_up_error
        return warmed[0]

    def _run(self) -> None:
        # Every decode, the warm-up included, runs on this one thread: ggml's OpenMP
        # pool belongs to the thread that first computes, and decoding from a second
        # thread measured 3x slower (docs/development.md, "The engine at work").
        try:
            self._warm_up()
        except BaseException as exc:  # handed to start()'s caller
            self._warm_up_error = exc
            return
        finally:
            self._warm.set()
        self.steps.run()

    @property
    def cache(self) -> PrefixCache:
        """What the slots and host memory hold for reuse (kv/prefix_cache.py)."""
        return self.steps.cache

    @property
    def drafting(self) -> bool:
        """Whether decode rows may carry drafts (--spec-type, as the load-time check left it)."""
        return self.steps.speculator is not None

    def submit(self, request: Request) -> RequestHandle:
        """Queue a request; raises ContextLengthExceeded, EmptyPrompt or loop.QueueFull up front."""
        return self.submit_choices([request])[0]

    def submit_choices(self, choices: list[Request]) -> list[RequestHandle]:
        """Queue several choices of one prompt (they differ in sampling): the prompt is prefilled once
        and its cells copied to the others' slots. At most `parallel` choices: they run side by side."""
        first = choices[0]
        if len(choices) > self.model.config.parallel:
            raise ValueError(f"{len(choices)} choices need more than the {self.model.config.parallel} slots")
        if any(choice.prompt_tokens != first.prompt_tokens for choice in choices):
            raise ValueError("the choices of one request share its prompt")
        n_prompt = len(first.prompt_tokens)
        if n_prompt == 0:
            raise EmptyPrompt("the prompt is empty after tokenization")
        longest = max(choice.max_tokens for choice in choices)
        if n_prompt + longest > self.model.n_ctx_seq:
            raise ContextLengthExceeded(n_prompt, longest, self.model.n_ctx_seq)
        sequences = [Sequence(choice) for choice in choices]
        parent, forks = sequences[0], sequences[1:]
        parent.forks = forks
        for fork in forks:
            fork.parent = parent
        handles = []
        for sequence in sequences:
            sequence.handle = RequestHandle(partial(self.steps.cancel, sequence))
            handles.append(sequence.handle)
        self.steps.add(parent)
        return handles

    async def pooled(self, kind: str, inputs: list[list[int]]) -> list[Vector]:
        """Each input's output from the pooled context `kind` (pooling/embeddings.py), between generation steps."""
        future: asyncio.Future[list[Vector]] = self._loop.create_future()
        job = EmbeddingJob(inputs, partial(self._resolve, future))
        self.steps.add_pooled(kind, job)
        try:
            return await future
        except asyncio.CancelledError:
            job.cancelled = True  # the engine skips what it has not decoded yet
            raise

    def on_slot(self, slot: int, action: Callable[[CellTransfer], T]) -> Future[T]:
        """Run `action` on the engine thread once `slot` is free: its result, or its exception, in the future."""
        return self.steps.on_slot(slot, action)

    def watch_cells(self, changed: Callable[[list[HeldCells]], None]) -> None:
        """Hear, on the engine thread, of the reusable cells in the slots and host memory whenever they change
        (EngineLoop.watch_cells): `changed` must only hand the list on."""
        self.steps.watch_cells(changed)

    def busy_slots(self) -> set[int]:
        return self.steps.busy_slots()

    def stats(self) -> SchedulerStats:
        return self.steps.stats()

    def _resolve(self, future: asyncio.Future, outcome: Outcome) -> None:
        """Engine thread -> event loop, for a pooled job's outcome (generation events go by self._events)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(_settle, future, outcome)

    @staticmethod
    def _deliver(events: Events) -> None:
        for sequence, event in events:
            handle = sequence.handle
            assert handle is not None  # submit_choices gives each sequence its handle before it is queued
            handle.push(event)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop the engine thread; every open request ends with a CANCELLED Finished."""
        self.steps.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive():  # never free the context under a running decode
            self._events.close()
            if self.projector is not None:
                self.projector.close()
            self.model.close()


def _settle(future: asyncio.Future, outcome: Outcome) -> None:
    if future.done():  # the caller stopped waiting
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
