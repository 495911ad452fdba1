"""Continuous batching: one thread, one llama_batch per step over every active sequence.

Each step admits waiting requests into free sequence slots (FIFO), drops
cancelled ones, packs one decode token per generating sequence plus prefill
chunks of new prompts into ONE batch, calls llama_decode once, samples every
sequence that asked for logits with its own native chain, and hands all the
step's events to the event loop in one call. Idle, it sleeps on a condition.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import llama_cpp
import structlog

from worker.engine.detokenizer import StreamingText
from worker.engine.model import LlamaModel
from worker.engine.requests import Event, Finished, FinishReason, Request, TokenEvent
from worker.engine.sampler import build_chain, free_chain

log = structlog.get_logger(__name__)

Dispatch = Callable[[list[tuple["Sequence", Event]]], None]


class QueueFull(Exception):
    pass


@dataclass(eq=False)
class Sequence:
    request: Request
    submitted_at: float = field(default_factory=time.monotonic)
    handle: object = None  # the RequestHandle events are delivered to
    cancelled: bool = False
    slot: int = -1
    chain: llama_cpp.llama_sampler_p | None = None
    text: StreamingText | None = None
    n_past: int = 0  # tokens of this sequence already in its KV stream
    generated: int = 0
    last_token: int = -1
    admitted_at: float = 0.0
    first_token_at: float = 0.0
    last_token_at: float = 0.0

    @property
    def deadline(self) -> float:
        timeout = self.request.timeout_s
        return self.submitted_at + timeout if timeout is not None else float("inf")

    @property
    def prefilling(self) -> bool:
        return self.n_past < len(self.request.prompt_tokens)


@dataclass(frozen=True)
class SchedulerStats:
    running: int
    waiting: int
    slots: int
    kv_cells_used: int
    kv_cells_total: int
    # Cumulative, for "where does a step's time go": llama_decode vs everything else on the thread.
    steps: int = 0
    step_s: float = 0.0
    decode_s: float = 0.0


class Scheduler:
    def __init__(self, model: LlamaModel, dispatch: Dispatch) -> None:
        self.model = model
        self.config = model.config
        self._dispatch = dispatch
        self._cond = threading.Condition()
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []
        self._free_slots = list(range(self.config.parallel - 1, -1, -1))
        self._stopping = False
        self._batch = llama_cpp.llama_batch_init(self.config.batch_size, 0, 1)
        self._kv_cells_used = 0
        self._steps, self._step_s, self._decode_s = 0, 0.0, 0.0

    # -- called from other threads -------------------------------------------------

    def add(self, sequence: Sequence) -> None:
        with self._cond:
            if len(self._waiting) >= self.config.max_queue:
                raise QueueFull(f"{len(self._waiting)} requests are already waiting")
            self._waiting.append(sequence)
            self._cond.notify()

    def cancel(self, sequence: Sequence) -> None:
        with self._cond:
            sequence.cancelled = True
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            running=len(self._running),
            waiting=len(self._waiting),
            slots=self.config.parallel,
            kv_cells_used=self._kv_cells_used,
            kv_cells_total=self.model.n_ctx,
            steps=self._steps,
            step_s=self._step_s,
            decode_s=self._decode_s,
        )

    # -- the engine thread ---------------------------------------------------------

    def run(self) -> None:
        try:
            while self._step():
                pass
        finally:
            self._finish_all(FinishReason.CANCELLED, "the worker is shutting down")
            llama_cpp.llama_batch_free(self._batch)

    def _step(self) -> bool:
        events: list[tuple[Sequence, Event]] = []
        with self._cond:
            while not (self._running or self._waiting or self._stopping):
                self._cond.wait()
            if self._stopping:
                return False
            started = time.perf_counter()
            self._drop_ended(events)
            self._admit()
        outputs = self._fill_batch()
        if outputs is not None:
            self._decode_and_sample(outputs, events)
        self._kv_cells_used = self._count_kv_cells()
        if events:
            self._dispatch(events)
        self._steps += 1
        self._step_s += time.perf_counter() - started
        return True

    def _admit(self) -> None:
        now = time.monotonic()
        while self._waiting and self._free_slots:
            seq = self._waiting.popleft()
            seq.slot = self._free_slots.pop()
            seq.admitted_at = now
            seq.chain = build_chain(seq.request.sampling, self.model.n_vocab)
            # Penalties look back over the prompt too, as llama-server's do.
            for token in seq.request.prompt_tokens[-seq.request.sampling.repeat_last_n:]:
                llama_cpp.llama_sampler_accept(seq.chain, token)
            seq.text = StreamingText(seq.request.stop)
            self._running.append(seq)

    def _drop_ended(self, events: list[tuple[Sequence, Event]]) -> None:
        """Cancelled and timed-out requests leave before the batch is built."""
        now = time.monotonic()

        def ending(seq: Sequence) -> tuple[FinishReason, str] | None:
            if seq.cancelled:
                return FinishReason.CANCELLED, "cancelled"
            if now >= seq.deadline:
                return FinishReason.TIMEOUT, f"the request ran past its {seq.request.timeout_s:g} s timeout"
            return None

        for seq in list(self._waiting):
            if (end := ending(seq)) is not None:
                self._waiting.remove(seq)
                events.append((seq, self._finished(seq, *end)))
        for seq in list(self._running):
            if (end := ending(seq)) is not None:
                self._retire(seq, end[0], events, message=end[1])

    def _fill_batch(self) -> list[tuple[Sequence, int]] | None:
        """Pack decode tokens first, then prompt chunks; return who gets sampled at which index."""
        batch, n, outputs = self._batch, 0, []
        budget = self.config.batch_size

        def put(token: int, seq: Sequence, logits: bool) -> None:
            nonlocal n
            batch.token[n] = token
            batch.pos[n] = seq.n_past
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = seq.slot
            batch.logits[n] = logits
            if logits:
                outputs.append((seq, n))
            seq.n_past += 1
            n += 1

        for seq in self._running:
            if not seq.prefilling:
                put(seq.last_token, seq, True)
        for seq in self._running:
            prompt = seq.request.prompt_tokens
            while seq.prefilling and n < budget:
                put(prompt[seq.n_past], seq, seq.n_past == len(prompt) - 1)
        batch.n_tokens = n
        return outputs if n else None

    def _decode_and_sample(self, outputs: list[tuple[Sequence, int]], events: list) -> None:
        started = time.perf_counter()
        rc = llama_cpp.llama_decode(self.model.ctx, self._batch)
        self._decode_s += time.perf_counter() - started
        if rc != 0:
            # Nothing of this batch can be trusted; end its sequences, keep serving others.
            message = f"llama_decode failed with status {rc}"
            log.error("decode_failed", status=rc, sequences=len(outputs))
            for seq in {seq for seq, _ in outputs}:
                self._retire(seq, FinishReason.ERROR, events, message=message)
            return
        now = time.monotonic()
        for seq, index in outputs:
            token = llama_cpp.llama_sampler_sample(seq.chain, self.model.ctx, index)
            self._on_token(seq, token, now, events)

    def _on_token(self, seq: Sequence, token: int, now: float, events: list) -> None:
        seq.generated += 1
        seq.last_token = token
        seq.last_token_at = now
        if seq.generated == 1:
            seq.first_token_at = now
        text = seq.text
        if self.model.is_eog(token):
            reason = FinishReason.EOS
            out = text.flush()
        else:
            out = text.feed(self.model.piece(token))
            if text.matched is not None:
                reason = FinishReason.STOP
            elif seq.generated >= seq.request.max_tokens:
                reason = FinishReason.LENGTH
                out += text.flush()
            else:
                reason = None
        if out:
            events.append((seq, TokenEvent(out, seq.generated)))
        if reason is not None:
            self._retire(seq, reason, events)

    def _retire(self, seq: Sequence, reason: FinishReason, events: list, message: str = "") -> None:
        """Leave at once: KV cells, sampler and slot are free before the next step."""
        llama_cpp.llama_memory_seq_rm(self.model.memory, seq.slot, -1, -1)
        free_chain(seq.chain)
        self._running.remove(seq)
        self._free_slots.append(seq.slot)
        events.append((seq, self._finished(seq, reason, message)))

    def _finished(self, seq: Sequence, reason: FinishReason, message: str) -> Finished:
        first = seq.first_token_at
        return Finished(
            reason=reason,
            prompt_tokens=len(seq.request.prompt_tokens),
            completion_tokens=seq.generated,
            stop_sequence=seq.text.matched if seq.text else None,
            message=message,
            queue_s=(seq.admitted_at or time.monotonic()) - seq.submitted_at,
            ttft_s=first - seq.submitted_at if first else 0.0,
            decode_s=seq.last_token_at - first if first else 0.0,
        )

    def _count_kv_cells(self) -> int:
        memory, used = self.model.memory, 0
        for slot in range(self.config.parallel):
            high = llama_cpp.llama_memory_seq_pos_max(memory, slot)
            if high >= 0:
                used += high - llama_cpp.llama_memory_seq_pos_min(memory, slot) + 1
        return used

    def _finish_all(self, reason: FinishReason, message: str) -> None:
        events: list[tuple[Sequence, Event]] = []
        with self._cond:
            for seq in list(self._running):
                self._retire(seq, reason, events, message=message)
            while self._waiting:
                seq = self._waiting.popleft()
                events.append((seq, self._finished(seq, reason, message)))
        if events:
            self._dispatch(events)
