"""Carries out a StepPlan on the llama context: fill batches, decode, verify drafts, sample, retire. Engine thread
only. Calls are laid out as core/scheduler.py decides; what a token adds to the answer is core/token_output.py's,
cells moved between slots and host memory kv/cell_transfer.py's."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp
import structlog

from worker.engine.core.scheduler import Admission, Chunk, Pace, StepPlan
from worker.engine.core.token_output import TokenOutput, finished_event
from worker.engine.kv.cell_transfer import CellTransfer
from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.prefix_cache import PrefixCache, Settle
from worker.engine.media import MediaSpan, runs, text_only
from worker.engine.modes import CacheMode
from worker.engine.native.memory import Cuts
from worker.engine.native.model import LlamaModel
from worker.engine.native.projector import Projector
from worker.engine.output.logprobs import LogprobReader
from worker.engine.output.sampler import Sampler
from worker.engine.requests import Event, FinishReason, PromptLogprobs, Scored
from worker.engine.sequence import Sequence, SequenceState
from worker.engine.speculative.sequence_view import DraftingSequence
from worker.engine.speculative.speculator import TIMING_AT_LOAD_S, Speculator

log = structlog.get_logger(__name__)

Events = list[tuple[Sequence, Event]]


@dataclass(frozen=True)
class Row:
    """One row of a llama_decode call."""

    token: int
    pos: int  # the token's index in its sequence (seq.positions places it)
    seq: Sequence
    logits: bool  # computed for sampling (or scoring)


@dataclass(frozen=True)
class PassPlace:
    """Where a pass is timed on purpose: a slot, from this position on (past the cells it keeps)."""

    slot: int
    start: int


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: PrefixCache, max_rows: int, pace: Pace,
                 speculator: Speculator | None = None, projector: Projector | None = None,
                 encoded: Callable[[], None] = lambda: None) -> None:
        self.model = model
        self._encoded = encoded  # an image's encoding ended (on the encoder thread): a step may now prefill it
        self.cache = cache
        self.pace = pace  # what the scheduler budgets prefill by
        self.speculator = speculator  # None: no speculative decoding
        self.projector = projector  # None: no images
        self._batch = llama_cpp.llama_batch_init(max_rows, 0, 1)
        # Rows of image embeddings: a prefill chunk's at most, or an image decoded whole (at most a micro-batch).
        embd_rows = max(max_rows, model.config.micro_batch)
        self._embd_batch = llama_cpp.llama_batch_init(embd_rows, model.n_embd, 1) if projector else None
        if self._embd_batch is not None and projector is not None and projector.mrope:
            # M-RoPE places an embedding row by 4 numbers: the batch's positions are rows x 4 (positions.py).
            self._mrope_pos = (llama_cpp.llama_pos * (4 * embd_rows))()
            self._own_pos = self._embd_batch.pos  # llama_batch_free frees the batch's own array
            self._embd_batch.pos = ctypes.cast(self._mrope_pos, ctypes.POINTER(llama_cpp.llama_pos))
        self._logprobs = LogprobReader(model.ctx, model.n_vocab, model.piece)
        self._output = TokenOutput(model.is_eog, model.piece, model.token_bytes)
        self._switched = False  # the context's LoRA adapters changed since its last llama_decode
        self.cells = CellTransfer(model, cache)  # cells between slots, host memory and files
        self.decode_s = 0.0  # cumulative time inside llama_decode

    def close(self) -> None:
        llama_cpp.llama_batch_free(self._batch)
        if self._embd_batch is not None:
            if self.projector is not None and self.projector.mrope:
                self._embd_batch.pos = self._own_pos
            llama_cpp.llama_batch_free(self._embd_batch)

    def start(self, admission: Admission) -> None:
        """Give a sequence its slot, its cached prefix and its sampler chain."""
        seq, slot, reuse, source = admission.sequence, admission.slot, admission.reuse, admission.source
        own = source is None and admission.saved is None  # it reuses the slot's own cells
        self.cells.save_dropped(slot, reuse if own else 0)
        self.cells.place(slot, seq.positions)  # (the cells it keeps are of its own prompt's tokens)
        # A recurrent state goes on from a checkpoint where the prompt stops sharing a slot's cells short of their
        # end (kv/checkpoints.py): the slot's own, the copy source's, or those saved with cells in host memory.
        saved = admission.saved
        holder = self.cache.record_of(saved) if saved is not None else self.cache.record(
            slot if source is None else source)
        checkpoint = self.cache.checkpoint(holder, reuse)
        self.cache.claim(slot, reuse if own else 0)
        if source is not None:
            # llama.cpp copies another slot's stream only whole, before the next llama_decode: the source's
            # cells up to now, which its own next token does not touch.
            self.cells.copy(source, slot)
        if saved is not None:
            reuse = self.cells.restore(slot, saved, admission.reuse)
        if not own:
            self.cache.share_checkpoints(holder, slot, reuse)
        if checkpoint is not None and not self.cells.resume(slot, checkpoint):
            self.cells.empty(slot)
            reuse = 0
        # Cells past the reused prefix belong to an earlier request (or the copy's source): drop them. The prefix
        # cache reuses a recurrent state only whole or from a checkpoint, so the cut is one its memory allows; were
        # it refused, the prompt is prefilled whole rather than continue a state that does not end where it begins.
        if not self.cells.cut(slot, reuse):
            self.cells.empty(slot)
            reuse = 0
        seq.slot, seq.n_past, seq.cached = slot, reuse, reuse
        if self.projector is not None and seq.parent is None:  # (a fork is given its parent's cells)
            for span in seq.request.media:
                if span.end > reuse:  # the images the cache does not hold whole
                    seq.embeddings[span.start] = self.projector.encode_later(span)
                    seq.embeddings[span.start].add_done_callback(lambda _: self._encoded())
        seq.state = SequenceState.FORKED if seq.parent is not None else SequenceState.PREFILLING
        seq.admitted_at = time.monotonic()
        seq.sampler = Sampler(seq.request.sampling, self.model.vocab, self.model.n_vocab, text_only(seq.prompt),
                              seq.request.preserved_tokens)
        if self.speculator:
            self.speculator.start(seq)

    def run(self, plan: StepPlan, events: Events) -> None:
        if plan.decode or plan.prefill:
            # The next llama_decode after a switch rebuilds llama.cpp's schedule: that call's time is the switch's.
            self._switched = self.model.adapters.use(plan.adapters)
        if self.projector is not None:
            self.projector.beside_streams = bool(plan.decode)
        if plan.decode:
            # A prompt waiting for its first token waits for this step's decode call too: with a prefill chunk to
            # run, decode rows carry no drafts, so that call stays one row a sequence (bench/chat.py).
            self._decode_step(plan.decode, events, drafting=not plan.prefill)
        for chunk in plan.prefill:
            self._prefill(chunk, events)
        if plan.settle is not None:
            self.model.adapters.use(plan.settle.adapters)
            self._settle(plan.settle)

    def _decode_step(self, decode: list[Sequence], events: Events, drafting: bool) -> None:
        """One row for each generating sequence, each followed by its draft if it drafts (speculative/speculator.py;
        `drafting` False: none this step)."""
        began = time.perf_counter()
        speculator = self.speculator
        drafts = speculator.drafts(decode) if speculator and drafting else {}
        undo = self._checkpoints_before_verifying(decode, drafts)
        steps = [(seq, drafts.get(seq, [])) for seq in decode]
        rows = []
        for seq, draft in steps:
            rows.append(Row(seq.generated[-1], seq.n_past, seq, True))
            rows.extend(Row(token, seq.n_past + 1 + i, seq, True) for i, token in enumerate(draft))
        if len(continuing := self._continuing(rows, events)) < len(rows):  # a row's logits are found by its index
            rows, steps = continuing, [(seq, draft) for seq, draft in steps if seq.state is not SequenceState.FINISHED]
        started = self.decode_s
        if not self._decoded(rows, events):
            return
        seconds = self.decode_s - started
        if not self._switch_took(seconds, self.pace.decode_call_s.get(len(rows))):
            self.pace.observe_decode(seconds, len(rows))
        if speculator:
            speculator.observe_call([(seq.slot, 1 + len(draft)) for seq, draft in steps], seconds)
        now, row, generated, rejected = time.monotonic(), 0, 0, []
        for seq, draft in steps:
            decoded_first = seq.generated[-1]
            accepted = self._verify(seq, draft, row, now, events, seq in undo)
            if draft and speculator:  # (drafts come only from the speculator)
                speculator.verified(seq, len(draft), accepted)
            if seq in undo and accepted < len(draft):
                rejected.append((seq, [decoded_first, *draft[:accepted]]))
            generated += 1 + accepted
            row += 1 + len(draft)
        for seq, kept in rejected:  # after every row's logits were read: this decodes again
            self._undo_draft(seq, undo[seq], kept, events)
        if speculator:
            speculator.observe_step(len(decode), generated, time.perf_counter() - began, bool(drafts))

    def _switch_took(self, seconds: float, usual: float | None) -> bool:
        """After an adapter switch, the first call's time over its usual time is the switch's (core/adapter_turns.py);
        True then: the call is no sample of its usual pace. `usual` None or 0: not measured yet."""
        if not self._switched:
            return False
        self._switched = False
        if usual:
            self.pace.observe_switch(seconds - usual)
        return True

    def _checkpoints_before_verifying(self, decode: list[Sequence], drafts: dict[DraftingSequence, list[int]]
                                      ) -> dict[Sequence, Checkpoint]:
        """Where the memory undoes nothing (a recurrent state without snapshots: native/memory.py), each drafting
        sequence's state before this step's decode, so that a rejected draft is undone by going back to it and
        decoding the kept tokens again (_undo_draft), as llama-server does. A sequence whose checkpoint memory
        cannot hold drafts nothing this step."""
        if self.model.memory_kind.cuts is not Cuts.WHOLE:
            return {}
        checkpoints = {}
        for seq in (seq for seq in decode if seq in drafts):
            if (checkpoint := self.cells.take_checkpoint(seq.slot, seq.n_past)) is None:
                del drafts[seq]
            else:
                checkpoints[seq] = checkpoint
        return checkpoints

    def _undo_draft(self, seq: Sequence, checkpoint: Checkpoint, kept: list[int], events: Events) -> None:
        """The slot back at the checkpoint taken before the step, and the step's kept tokens (its decode row's and
        the accepted drafted ones) decoded again as one chunk, no logits: the state then holds what decoding without
        the draft makes (the load-time check measures a chunk's state against one-token decodes). A slot emptied
        meanwhile (its sequence ended where nothing is kept) stays empty."""
        if llama_cpp.llama_memory_seq_pos_max(self.model.memory, seq.slot) < 0:
            return
        if self.cells.resume(seq.slot, checkpoint):
            batch = self._batch
            for i, token in enumerate(kept):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, seq.positions.cell(checkpoint.pos + i), 1
                batch.seq_id[i][0], batch.logits[i] = seq.slot, False
            batch.n_tokens = len(kept)
            if self._llama_decode(batch) == 0:
                return
        self.cells.empty(seq.slot)
        self.cache.forget(seq.slot)
        self.retire(seq, FinishReason.ERROR, events, "its state could not go back to before a rejected draft")

    def _verify(self, seq: Sequence, draft: list[int], row: int, now: float, events: Events,
                checkpointed: bool = False) -> int:
        """Sample the sequence's rows in order, keeping drafted tokens while each is what was sampled: row i's
        logits are then those of the tokens the sequence really has, and its sample is the next token. Returns
        the drafted tokens accepted (the tokens generated are one more). `checkpointed`: rejected tokens are undone
        from a checkpoint after the step (_undo_draft), not cut here."""
        accepted = 0
        seq.n_past += 1
        token = self._sample(seq, row, now, events)
        while accepted < len(draft) and token == draft[accepted] and seq.state is SequenceState.DECODING:
            accepted += 1
            seq.n_past += 1  # the drafted token's cell holds what the sequence has
            token = self._sample(seq, row + accepted, now, events)
        if draft and not checkpointed and not self.cells.cut(seq.slot, seq.n_past):
            # The rejected tokens' cells stay where nothing may read or reuse them: drafts are held to what the
            # memory undoes (speculative/speculator.py), so this is a fault, and ends this sequence alone.
            self.retire(seq, FinishReason.ERROR, events, "its memory refused to drop a rejected draft")
        return accepted

    def measure_passes(self, speculator: Speculator, known: dict[int, float] | None) -> bool:
        """Time a pass of each row count a draft may make, in slot 0 (left empty): drafting then weighs this
        machine's costs from the first step (speculative/speculator.py). Before any request, on the engine thread,
        for at most TIMING_AT_LOAD_S: the row counts left are timed once idle, and said in the log and /health.
        `known` (an earlier start's, startup/check_record.py) stands for the timing where it has every row count.
        Returns whether every row count was timed here."""
        if known is not None and set(speculator.timed_rows) <= known.keys():
            for rows in speculator.timed_rows:
                speculator.pass_timed(rows, known[rows])
            log.info("passes_reused", ms=speculator.costs.milliseconds)
            return False
        deadline = time.perf_counter() + TIMING_AT_LOAD_S
        for rows in speculator.timed_rows:
            if time.perf_counter() > deadline:
                speculator.untimed.append(rows)
            elif (seconds := self.time_pass(rows, PassPlace(0, 0))) is not None:
                speculator.pass_timed(rows, seconds)
        log.info("passes_timed", ms=speculator.costs.milliseconds, untimed=speculator.untimed)
        return speculator.all_passes_timed

    def time_pass(self, rows: int, place: PassPlace) -> float | None:
        """The faster of two passes of `rows` rows at `place`, whose cells are dropped after each (as a rejected
        draft's are: the slot's own cells stay as they were); None where llama_decode failed."""
        batch, fastest = self._batch, None
        for _ in range(2):
            for i in range(rows):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = i, place.start + i, 1
                batch.seq_id[i][0], batch.logits[i] = place.slot, True
            batch.n_tokens = rows
            started = time.perf_counter()
            failed = llama_cpp.llama_decode(self.model.ctx, batch) != 0
            seconds = time.perf_counter() - started
            if not self.cells.cut_at(place.slot, place.start):  # (pass_place picks a slot where cuts are bounded)
                self.cells.empty(place.slot)
                self.cache.forget(place.slot)
                return None
            if failed:
                return None
            fastest = seconds if fastest is None else min(fastest, seconds)
        return fastest

    def pass_place(self, free_slots: list[int], rows: int) -> PassPlace | None:
        """Where passes of up to `rows` rows can be timed between requests: past the cells of the free slot that
        holds the fewest (none is being copied; its cells are kept, and few cells to attend to keep the pass near
        its cost at load, timed in an empty slot). None: no free slot has room."""
        places = [PassPlace(slot, llama_cpp.llama_memory_seq_pos_max(self.model.memory, slot) + 1)
                  for slot in free_slots if not self.cells.copying(slot)]
        if not self.model.memory_kind.cuts_anywhere:  # a recurrent state cannot drop the pass's rows: empty slots only
            places = [place for place in places if place.start == 0]
        place = min(places, key=lambda place: place.start, default=None)
        return place if place is not None and place.start + rows <= self.model.n_ctx_seq else None

    def _settle(self, settle: Settle) -> None:
        """Drop a free slot's cells from settle.start and prefill settle.start..end again, as one chunk."""
        if not self.cells.cut(settle.slot, settle.start):  # (the prefix cache settles only where cuts are free)
            self.cells.empty(settle.slot)
            self.cache.forget(settle.slot)
            return
        batch, positions = self._batch, self.cells.positions(settle.slot)
        for i, pos in enumerate(range(settle.start, settle.end)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = settle.tokens[pos], positions.cell(pos), 1
            batch.seq_id[i][0], batch.logits[i] = settle.slot, False
        batch.n_tokens = settle.end - settle.start
        rc = self._llama_decode(batch)
        if rc == 0:
            self.cache.settled(settle)
        else:
            log.error("decode_failed", status=rc, settling_slot=settle.slot)
            self.cells.empty(settle.slot)
            self.cache.forget(settle.slot)

    def _prefill(self, chunk: Chunk, events: Events) -> None:
        seq = chunk.sequence
        prompt = seq.prompt
        n_top = seq.request.prompt_logprobs  # None: the prompt is not scored
        scored = n_top is not None
        started, last_call_rows = self.decode_s, 0
        # A chunk over an image is cut where text meets the image: a llama_batch holds token ids or embeddings, not
        # both. The image is encoded in the step whose chunk first reaches it, within the same prefill budget as text.
        for start, end, span in runs(prompt, seq.request.media, chunk.start, chunk.end):
            # Logits for the prompt's last row (the answer's first token), or every row when the prompt is scored.
            last = chunk.completes_prompt and end == chunk.end
            if span is not None:
                decoded = self._decode_image(seq, span, start, end, last, events)
            else:
                decoded = self._decode([Row(prompt[pos], pos, seq, scored or (last and pos == end - 1))
                                        for pos in range(start, end)], events)
            if not decoded:
                return
            last_call_rows = end - start
        rows = chunk.end - chunk.start
        if not self._switch_took(self.decode_s - started, self.pace.prefill_token_s * rows):
            self.pace.observe_prefill(self.decode_s - started, rows)
        if self.speculator:
            self.speculator.observe_call([(seq.slot, rows)], self.decode_s - started)
        seq.n_past = chunk.end
        if chunk.end in self.cache.checkpoint_positions(len(prompt), seq.request.checkpoints):
            self._checkpoint(seq)
        if n_top is not None:
            self._score_prompt(chunk, n_top)
        if chunk.completes_prompt:
            now, row = time.monotonic(), last_call_rows - 1  # the prompt's last row, in the chunk's last call
            for fork in seq.forks:
                if fork.state is SequenceState.FORKED:
                    self._fork(seq, fork)
                    self._sample(fork, row, now, events)
            seq.state = SequenceState.DECODING
            if scored:
                events.append((seq, PromptLogprobs(self.model.piece(prompt[0]), tuple(seq.prompt_logprobs))))
            if seq.request.score_tokens:
                events.append((seq, Scored(self._logprobs.logits(row, seq.request.score_tokens))))
            if seq.request.max_tokens == 0:  # the prompt alone was asked for (its scores, or its cells cached)
                self.retire(seq, FinishReason.LENGTH, events)
                return
            self._sample(seq, row, now, events)

    def _checkpoint(self, seq: Sequence) -> None:
        """Save the slot's recurrent state where its prompt is checkpointed (kv/checkpoints.py), within --cache-ram."""
        checkpoint = self.cells.take_checkpoint(seq.slot, seq.n_past)
        kept = checkpoint is not None and self.cache.add_checkpoint(seq.slot, checkpoint)
        log.debug("checkpoint", slot=seq.slot, pos=seq.n_past, bytes=checkpoint.size if checkpoint else 0, kept=kept)

    def _score_prompt(self, chunk: Chunk, n_top: int) -> None:
        """Each chunk row's logits score the prompt token after it (the last row's score the answer's first).

        These are the rows of the chunk's own llama_decode call, read before the next call replaces them: the
        same aligned chunks a prompt is always prefilled in, so the scores are what one-by-one decoding of
        those tokens reports (docs/cache-and-exactness.md: aligned prefill matches single-token decode)."""
        seq = chunk.sequence
        prompt = seq.prompt
        for row, pos in enumerate(range(chunk.start, min(chunk.end, len(prompt) - 1))):
            seq.prompt_logprobs.append(self._logprobs.read(row, prompt[pos + 1], n_top))

    def _fork(self, parent: Sequence, fork: Sequence) -> None:
        """Give the fork a copy of the parent's prompt cells (llama.cpp copies the stream before the next decode)."""
        self.cells.copy(parent.slot, fork.slot)
        fork.n_past, fork.cached = parent.n_past, parent.cached
        fork.state = SequenceState.DECODING

    def _sample(self, seq: Sequence, row: int, now: float, events: Events) -> int | None:
        """Draw the sequence's next token from logits row `row` with its own chain (None: none, it retired)."""
        phase = seq.text.phase
        reasoning = phase is not None and phase.in_reasoning
        token = self._output.forced_token(seq, reasoning)
        if token is None:
            sampler = seq.sampler
            assert sampler is not None  # start gives it its chain; retired, it samples no more
            token = sampler.sample(self.model.ctx, row, reasoning)
            if reasoning:
                seq.thought += 1
        if token is None:  # the grammar allows no token here (it needs text no token spells)
            self.retire(seq, FinishReason.ERROR, events,
                        f"the grammar allows no token after {len(seq.generated)} generated tokens")
            return None
        if seq.request.logprobs is not None and not self.model.is_eog(token):
            seq.logprobs.append(self._logprobs.read(row, token, seq.request.logprobs))
        event, reason = self._output.append(seq, token, now)
        if seq.draft is not None and self.speculator is not None:  # (draft states come only from the speculator)
            self.speculator.generated(seq, token)
        if event is not None:
            events.append((seq, event))
        if reason is not None:
            self.retire(seq, reason, events)
        return token

    def _decode(self, rows: list[Row], events: Events) -> bool:
        """One llama_decode over `rows`; False (their sequences retired) if it failed, or if no row was left to
        decode (a sequence whose cells do not end where its rows begin is retired first, alone: see _continuing)."""
        rows = self._continuing(rows, events)
        return bool(rows) and self._decoded(rows, events)

    def _decoded(self, rows: list[Row], events: Events) -> bool:
        """One llama_decode over rows that continue their sequences' cells; False (their sequences retired) if it
        failed."""
        batch = self._batch
        for i, row in enumerate(rows):
            batch.token[i] = row.token
            batch.pos[i] = row.seq.positions.cell(row.pos)
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = row.seq.slot
            batch.logits[i] = row.logits
        batch.n_tokens = len(rows)
        rc = self._llama_decode(batch)
        if rc == 0:
            return True
        self._failed(rc, list({id(row.seq): row.seq for row in rows}.values()), events)
        return False

    def _continuing(self, rows: list[Row], events: Events) -> list[Row]:
        """The rows whose sequence's cells end right before them. llama.cpp refuses a whole call where one sequence's
        rows do not continue its cells (a recurrent state that a cut could not move back): that sequence is retired
        here, so the call goes on for the others; planning keeps this from happening at all."""
        starts: dict[Sequence, int] = {}
        for row in rows:
            starts.setdefault(row.seq, row.pos)
        broken = {seq for seq, pos in starts.items()
                  if llama_cpp.llama_memory_seq_pos_max(self.model.memory, seq.slot) != seq.positions.held_end(pos)}
        for seq in broken:
            ends = llama_cpp.llama_memory_seq_pos_max(self.model.memory, seq.slot)
            log.error("rows_not_continuing", slot=seq.slot, cells_end=ends + 1, rows_start=starts[seq],
                      request_id=seq.request.request_id)
            self.retire(seq, FinishReason.ERROR, events, f"its cells end at position {ends + 1}, its next row is "
                                                         f"token {starts[seq]}'s")
        return [row for row in rows if row.seq not in broken] if broken else rows

    def _decode_image(self, seq: Sequence, span: MediaSpan, start: int, end: int, logits_last: bool,
                      events: Events) -> bool:
        """One llama_decode of the image's embeddings for tokens start..end (encoded on the encoder thread since
        the sequence's admission: planning waits for them); False (the sequence retired) if either failed."""
        batch, projector = self._embd_batch, self.projector
        assert batch is not None and projector is not None  # only an engine with a projector takes images
        if not self._continuing([Row(-1, start, seq, False)], events):  # (its rows must go on from its cells too)
            return False
        try:
            embeddings = seq.embeddings[span.start].result()
        except (RuntimeError, MemoryError) as failed:
            log.error("image_encode_failed", why=str(failed), request_id=seq.request.request_id)
            self.retire(seq, FinishReason.ERROR, events, str(failed))
            return False
        width = self.model.n_embd * ctypes.sizeof(ctypes.c_float)
        source = ctypes.addressof(embeddings) + (start - span.start) * width
        ctypes.memmove(ctypes.addressof(batch.embd.contents), source, (end - start) * width)
        for i, index in enumerate(range(start, end)):
            batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = seq.positions.cell(index), 1, seq.slot
            batch.logits[i] = logits_last and index == end - 1
        if projector.mrope:  # each row placed by 4 numbers, written over the one above
            projector.place_mrope(span, seq.positions.cell(span.start), start, end, batch.pos)
        batch.n_tokens = end - start
        if span.whole:  # its rows attend to each other both ways (Gemma 3): this call alone, as mtmd's helper does
            llama_cpp.llama_set_causal_attn(self.model.ctx, False)
        rc = self._llama_decode(batch)
        if span.whole:
            llama_cpp.llama_set_causal_attn(self.model.ctx, True)
        if end == span.end:  # all of the image is in the KV: its embeddings are done with
            del seq.embeddings[span.start]
        if rc == 0:
            return True
        self._failed(rc, [seq], events)
        return False

    def _failed(self, rc: int, sequences: list[Sequence], events: Events) -> None:
        """Nothing of a failed call can be trusted: end its sequences, keep serving the others."""
        log.error("decode_failed", status=rc, sequences=len(sequences))
        for seq in sequences:
            self.retire(seq, FinishReason.ERROR, events, f"llama_decode failed with status {rc}")

    def _llama_decode(self, batch: llama_cpp.llama_batch) -> int:
        """llama_decode, timed; it carries out the stream copies asked for before it."""
        started = time.perf_counter()
        rc = llama_cpp.llama_decode(self.model.ctx, batch)
        self.decode_s += time.perf_counter() - started
        self.cells.decoded()
        return rc

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

