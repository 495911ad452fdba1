"""A step's update: what the runner's StepOutput means for the answers and the engine. The tokens go into the answers
(core/token_output.py: text, stop strings, events), ended sequences leave their slots (their cells released to the
prefix cache, or dropped), and the calls' times go to the pace the scheduler budgets by and to the drafts' costs.
Engine thread only, after each step's calls."""

from __future__ import annotations

import time

import structlog

from worker.engine.core.scheduler import Pace
from worker.engine.core.step_output import Call, Drawn, Prefilled, Read, StepOutput
from worker.engine.core.token_output import TokenOutput, finished_event
from worker.engine.kv.cell_transfer import CellTransfer
from worker.engine.kv.prefix_cache import PrefixCache
from worker.engine.modes import CacheMode
from worker.engine.native.model import LlamaModel
from worker.engine.requests import Event, FinishReason
from worker.engine.sequence import Sequence, SequenceState
from worker.engine.speculative.speculator import Speculator

log = structlog.get_logger(__name__)

Events = list[tuple[Sequence, Event]]


class StepUpdate:
    def __init__(self, model: LlamaModel, cache: PrefixCache, cells: CellTransfer, pace: Pace,
                 speculator: Speculator | None = None) -> None:
        self.cache = cache
        self.cells = cells
        self.pace = pace  # what the scheduler budgets prefill by
        self.speculator = speculator  # None: no speculative decoding
        self._output = TokenOutput(model.is_eog, model.piece, model.token_bytes)

    def apply(self, out: StepOutput, events: Events) -> None:
        for slot, checkpoint in out.checkpoints:  # (before a prompt that ends there leaves: its record keeps them)
            kept = self.cache.add_checkpoint(slot, checkpoint)
            log.debug("checkpoint", slot=slot, pos=checkpoint.pos, bytes=checkpoint.size, kept=kept)
        if out.settled is not None:
            self.cache.settled(out.settled)
        self._observe(out.calls, out.switched)
        now = time.monotonic()
        for outcome in out.outcomes:
            if isinstance(outcome, Drawn):
                self._take(outcome, now, events)
            elif isinstance(outcome, Prefilled):
                outcome.seq.state = SequenceState.DECODING
            elif isinstance(outcome, Read):
                events.append((outcome.seq, outcome.event))
            else:
                self.retire(outcome.seq, outcome.reason, events, outcome.message)
        if out.decode is not None and self.speculator:  # the step's time up to its tokens' output, drafting included
            step = out.decode
            self.speculator.observe_step(step.rows, step.generated, time.perf_counter() - step.began, step.drafted)

    def _take(self, drawn: Drawn, now: float, events: Events) -> None:
        """The drawn tokens into the sequence's answer, in order, up to where it ends; the rows drawn after that end
        are dropped as a rejected draft's are."""
        seq, speculator = drawn.seq, self.speculator
        for i, (token, entry) in enumerate(zip(drawn.tokens, drawn.logprobs)):
            if seq.state is SequenceState.FINISHED:
                break
            if entry is not None:
                seq.logprobs.append(entry)
            event, reason = self._output.append(seq, token, now)
            if seq.draft is not None and speculator is not None:  # (draft states come only from the speculator)
                speculator.generated(seq, token)
            if event is not None:
                events.append((seq, event))
            if reason is not None:
                self._drop_rows_after(seq, len(drawn.tokens) - 1 - i)
                self.retire(seq, reason, events)
        if drawn.drafted and speculator is not None:
            speculator.verified(seq, drawn.drafted, drawn.accepted)

    def _drop_rows_after(self, seq: Sequence, extra: int) -> None:
        """The answer ended `extra` drawn tokens before the last (a stop string found in a draft's text): their cells
        go as a rejected draft's do, or all of the slot's where its memory cannot drop them alone."""
        if not extra:
            return
        log.info("rows_past_the_end_dropped", rows=extra, request_id=seq.request.request_id)
        seq.n_past -= extra
        if not self.cells.cut(seq.slot, seq.n_past):
            self.cells.forget(seq.slot)
            seq.n_past = 0  # the slot holds nothing for the prefix cache

    def _observe(self, calls: list[Call], switched: bool) -> None:
        """The calls' times: the pace of decode rows and prefilled tokens, and what each pass costs for drafting.
        After an adapter switch, the first call's time over its usual time is the switch's (core/adapter_turns.py):
        that call is no sample of its usual pace."""
        pace = self.pace
        for call in calls:
            usual = pace.prefill_token_s * call.total if call.prefill else pace.decode_call_s.get(call.total)
            if switched:
                switched = False
                if usual:  # (None or 0: not measured yet)
                    pace.observe_switch(call.seconds - usual)
            elif call.prefill:
                pace.observe_prefill(call.seconds, call.total)
            else:
                pace.observe_decode(call.seconds, call.total)
            if self.speculator:
                self.speculator.observe_call(call.rows, call.seconds)

    def retire(self, seq: Sequence, reason: FinishReason, events: Events, message: str = "") -> None:
        """Leave the slot: free the chain; keep the cells for the prefix cache, or drop them."""
        if seq.state is SequenceState.FINISHED:
            return
        if seq.sampler is not None:
            seq.sampler.free()
            seq.sampler = None
        for encoding in seq.embeddings.values():  # one not begun yet is not begun at all
            encoding.cancel()
        seq.embeddings.clear()
        for fork in seq.forks:  # forks still waiting for this prompt will never get it
            if fork.state is SequenceState.FORKED:
                self.retire(fork, reason, events, message)
        if seq.slot >= 0:
            if reason is FinishReason.ERROR or self.cache.mode is CacheMode.OFF:
                # After a failed decode the stream's cells are unknown: nothing of it may be reused.
                self.cells.empty(seq.slot)
            else:
                # Every cell up to n_past is complete (cancels land between steps); prompt cells came from prefill.
                self.cache.release(seq.slot, seq.tokens_in_kv(), min(seq.n_past, len(seq.prompt)),
                                   seq.request.adapters)
        seq.state = SequenceState.FINISHED
        events.append((seq, finished_event(seq, reason, message)))
