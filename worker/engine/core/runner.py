"""Carries out a StepPlan on the llama context: fill batches, decode, verify drafts, sample; and returns what it
computed as a StepOutput (core/step_output.py), changing nothing else. Engine thread only. Calls are laid out as
core/scheduler.py decides; what the tokens add to the answers, and what the calls' times teach, is the step's update's
(core/step_update.py); cells moved between slots and host memory are kv/cell_transfer.py's."""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import llama_cpp
import structlog

from worker.engine.core.scheduler import Admission, Chunk, StepPlan
from worker.engine.core.step_output import Call, DecodeStep, Drawn, Prefilled, Read, StepOutput
from worker.engine.core.token_output import forced_token
from worker.engine.kv.cell_transfer import CellTransfer
from worker.engine.kv.checkpoints import Checkpoint
from worker.engine.kv.prefix_cache import PrefixCache, Settle
from worker.engine.media import MediaSpan, runs, text_only
from worker.engine.native.memory import Cuts, last_position
from worker.engine.native.model import LlamaModel
from worker.engine.native.projector import Projector
from worker.engine.output.logprobs import LogprobReader
from worker.engine.output.sampler import Sampler
from worker.engine.requests import FinishReason, PromptLogprobs, Scored
from worker.engine.sequence import Sequence, SequenceState
from worker.engine.speculative.sequence_view import DraftingSequence
from worker.engine.speculative.speculator import Speculator

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Row:
    """One row of a llama_decode call."""

    token: int
    pos: int  # the token's index in its sequence (seq.positions places it)
    seq: Sequence
    logits: bool  # computed for sampling (or scoring)


class ModelRunner:
    def __init__(self, model: LlamaModel, cache: PrefixCache, cells: CellTransfer, max_rows: int,
                 speculator: Speculator | None = None, projector: Projector | None = None,
                 encoded: Callable[[], None] = lambda: None) -> None:
        self.model = model
        self._encoded = encoded  # an image's encoding ended (on the encoder thread): a step may now prefill it
        self.cache = cache  # read at admission: what a slot holds, its checkpoints
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
        self.cells = cells  # cells between slots, host memory and files
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
        sampling = seq.request.sampling
        if sampling.ignore_eos:  # llama-server's: every end-of-generation token biased to -inf
            banned = dict.fromkeys(self.model.eog_tokens, -math.inf)
            sampling = replace(sampling, logit_bias=sampling.logit_bias | banned)
        seq.sampler = Sampler(sampling, self.model.vocab, self.model.n_vocab, text_only(seq.prompt),
                              seq.request.preserved_tokens)
        if self.speculator:
            self.speculator.start(seq)

    def streams_decode(self, decoding: bool) -> None:
        """Whether sequences decode on after the step (its finished ones retired): the encoder takes half the threads
        only beside them, and the flag run() set from the step's plan would outlive the last stream, so that an image
        arriving once they ended was encoded with half the threads."""
        if self.projector is not None:
            self.projector.beside_streams = decoding

    def run(self, plan: StepPlan) -> StepOutput:
        out = StepOutput()
        if plan.decode or plan.prefill:
            # The next llama_decode after a switch rebuilds llama.cpp's schedule: that call's time is the switch's.
            out.switched = self.model.adapters.use(plan.adapters)
        if self.projector is not None:
            self.projector.beside_streams = bool(plan.decode)
        if plan.decode:
            # A prompt waiting for its first token waits for this step's decode call too: with a prefill chunk to
            # run, decode rows carry no drafts, so that call stays one row a sequence (bench/chat.py).
            self._decode_step(plan.decode, out, drafting=not plan.prefill)
        for chunk in plan.prefill:
            self._prefill(chunk, out)
        if plan.settle is not None:
            self.model.adapters.use(plan.settle.adapters)
            if self._settle(plan.settle):
                out.settled = plan.settle
        return out

    def _decode_step(self, decode: list[Sequence], out: StepOutput, drafting: bool) -> None:
        """One row for each generating sequence, each followed by its draft if it drafts (speculative/speculator.py;
        `drafting` False: none this step). A sequence's rows are sampled in order while each drew its draft's token;
        whether the answer ended among them is the update's to find, which then drops the rows after its end."""
        began = time.perf_counter()
        speculator = self.speculator
        drafts = speculator.drafts([seq for seq in decode if not seq.draws_by_phase()]) \
            if speculator and drafting else {}
        undo = self._checkpoints_before_verifying(decode, drafts)
        steps = [(seq, drafts.get(seq, [])) for seq in decode]
        rows = []
        for seq, draft in steps:
            rows.append(Row(seq.generated[-1], seq.n_past, seq, True))
            rows.extend(Row(token, seq.n_past + 1 + i, seq, True) for i, token in enumerate(draft))
        if len(continuing := self._continuing(rows, out)) < len(rows):  # a row's logits are found by its index
            rows, steps = continuing, [(seq, draft) for seq, draft in steps if not out.ended(seq)]
        started = self.decode_s
        if not self._decoded(rows, out):
            return
        out.calls.append(Call([(seq.slot, 1 + len(draft)) for seq, draft in steps], self.decode_s - started, False))
        row, generated, rejected = 0, 0, []
        for seq, draft in steps:
            decoded_first = seq.generated[-1]
            drawn = self._verify(seq, draft, row, out, seq in undo)
            if seq in undo and drawn.accepted < len(draft):
                rejected.append((seq, [decoded_first, *draft[:drawn.accepted]]))
            generated += 1 + drawn.accepted
            row += 1 + len(draft)
        for seq, kept in rejected:  # after every row's logits were read: this decodes again
            if not out.ended(seq):
                self._undo_draft(seq, undo[seq], kept, out)
        out.decode = DecodeStep(len(decode), generated, began, bool(drafts))

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

    def _undo_draft(self, seq: Sequence, checkpoint: Checkpoint, kept: list[int], out: StepOutput) -> None:
        """The slot back at the checkpoint taken before the step, and the step's kept tokens (its decode row's and
        the accepted drafted ones) decoded again as one chunk, no logits: the state then holds what decoding without
        the draft makes (the load-time check measures a chunk's state against one-token decodes)."""
        if self.cells.resume(seq.slot, checkpoint):
            batch = self._batch
            for i, token in enumerate(kept):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, seq.positions.cell(checkpoint.pos + i), 1
                batch.seq_id[i][0], batch.logits[i] = seq.slot, False
            batch.n_tokens = len(kept)
            if self._llama_decode(batch) == 0:
                return
        self.cells.forget(seq.slot)
        out.end(seq, FinishReason.ERROR, "its state could not go back to before a rejected draft")

    def _verify(self, seq: Sequence, draft: list[int], row: int, out: StepOutput, checkpointed: bool) -> Drawn:
        """Sample the sequence's rows in order, keeping drafted tokens while each is what was sampled: row i's
        logits are then those of the tokens the sequence really has, and its sample is the next token. `checkpointed`:
        rejected tokens are undone from a checkpoint after the step (_undo_draft), not cut here."""
        drawn = Drawn(seq, drafted=len(draft))
        out.outcomes.append(drawn)
        seq.n_past += 1
        token = self._sample(seq, row, drawn, out)
        while drawn.accepted < len(draft) and token == draft[drawn.accepted] and not self._ends(seq, drawn):
            drawn.accepted += 1
            seq.n_past += 1  # the drafted token's cell holds what the sequence has
            token = self._sample(seq, row + drawn.accepted, drawn, out)
        if draft and not checkpointed and not self.cells.cut(seq.slot, seq.n_past):
            # The rejected tokens' cells stay where nothing may read or reuse them: drafts are held to what the
            # memory undoes (speculative/speculator.py), so this is a fault, and ends this sequence alone.
            out.end(seq, FinishReason.ERROR, "its memory refused to drop a rejected draft")
        return drawn

    def _ends(self, seq: Sequence, drawn: Drawn) -> bool:
        """Whether the answer ends at the last token drawn by a rule of tokens alone (an end of generation, max_tokens):
        no drafted token past it is kept. An end that only its text shows (a stop string) is the update's to find."""
        token = drawn.tokens[-1] if drawn.tokens else None
        return token is None or self.model.is_eog(token) or \
            len(seq.generated) + len(drawn.tokens) >= seq.request.max_tokens

    def _settle(self, settle: Settle) -> bool:
        """Drop a free slot's cells from settle.start and prefill settle.start..end again, as one chunk; False: the
        slot is emptied instead."""
        if not self.cells.cut(settle.slot, settle.start):  # (the prefix cache settles only where cuts are free)
            self.cells.forget(settle.slot)
            return False
        batch, positions = self._batch, self.cells.positions(settle.slot)
        for i, pos in enumerate(range(settle.start, settle.end)):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = settle.tokens[pos], positions.cell(pos), 1
            batch.seq_id[i][0], batch.logits[i] = settle.slot, False
        batch.n_tokens = settle.end - settle.start
        rc = self._llama_decode(batch)
        if rc != 0:
            log.error("decode_failed", status=rc, settling_slot=settle.slot)
            self.cells.forget(settle.slot)
        return rc == 0

    def _prefill(self, chunk: Chunk, out: StepOutput) -> None:
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
                decoded = self._decode_image(seq, span, start, end, last, out)
            else:
                decoded = self._decode([Row(prompt[pos], pos, seq, scored or (last and pos == end - 1))
                                        for pos in range(start, end)], out)
            if not decoded:
                return
            last_call_rows = end - start
        out.calls.append(Call([(seq.slot, chunk.end - chunk.start)], self.decode_s - started, True))
        seq.n_past = chunk.end
        if chunk.end in self.cache.checkpoint_positions(len(prompt), seq.request.checkpoints):
            self._checkpoint(seq, out)
        if n_top is not None:
            self._score_prompt(chunk, n_top)
        if chunk.completes_prompt:
            row = last_call_rows - 1  # the prompt's last row, in the chunk's last call
            for fork in seq.forks:
                if fork.state is SequenceState.FORKED:
                    self._fork(seq, fork)
                    out.outcomes.append(Prefilled(fork))
                    self._draw(fork, row, out)
            out.outcomes.append(Prefilled(seq))
            if scored:
                out.outcomes.append(Read(seq, PromptLogprobs(self.model.piece(prompt[0]),
                                                             tuple(seq.prompt_logprobs))))
            if seq.request.score_tokens:
                out.outcomes.append(Read(seq, Scored(self._logprobs.logits(row, seq.request.score_tokens))))
            if seq.request.max_tokens == 0:  # the prompt alone was asked for (its scores, or its cells cached)
                out.end(seq, FinishReason.LENGTH)
                return
            self._draw(seq, row, out)

    def _checkpoint(self, seq: Sequence, out: StepOutput) -> None:
        """Save the slot's recurrent state where its prompt is checkpointed (kv/checkpoints.py): the update keeps it
        within --cache-ram."""
        checkpoint = self.cells.take_checkpoint(seq.slot, seq.n_past)
        if checkpoint is not None:
            out.checkpoints.append((seq.slot, checkpoint))
        else:
            log.debug("checkpoint", slot=seq.slot, pos=seq.n_past, bytes=0, kept=False)

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

    def _draw(self, seq: Sequence, row: int, out: StepOutput) -> None:
        """A prompt's first token, from its last row."""
        drawn = Drawn(seq)
        out.outcomes.append(drawn)
        self._sample(seq, row, drawn, out)

    def _sample(self, seq: Sequence, row: int, drawn: Drawn, out: StepOutput) -> int | None:
        """Draw the sequence's next token from logits row `row` with its own chain, onto `drawn` (None: none, the
        grammar allows no token: the sequence ends)."""
        phase = seq.text.phase  # as the last update left it: drafts never cross its change where it matters here
        reasoning = phase is not None and phase.in_reasoning
        token = forced_token(seq, reasoning)
        if token is None:
            sampler = seq.sampler
            assert sampler is not None  # start gives it its chain; retired, it samples no more
            token = sampler.sample(self.model.ctx, row, reasoning)
            if reasoning:
                seq.thought += 1
        if token is None:  # the grammar allows no token here (it needs text no token spells)
            out.end(seq, FinishReason.ERROR,
                    f"the grammar allows no token after {len(seq.generated) + len(drawn.tokens)} generated tokens")
            return None
        n_top = seq.request.logprobs
        drawn.tokens.append(token)
        drawn.logprobs.append(self._logprobs.read(row, token, n_top)
                              if n_top is not None and not self.model.is_eog(token) else None)
        return token

    def _decode(self, rows: list[Row], out: StepOutput) -> bool:
        """One llama_decode over `rows`; False (their sequences ended) if it failed, or if no row was left to
        decode (a sequence whose cells do not end where its rows begin ends first, alone: see _continuing)."""
        rows = self._continuing(rows, out)
        return bool(rows) and self._decoded(rows, out)

    def _decoded(self, rows: list[Row], out: StepOutput) -> bool:
        """One llama_decode over rows that continue their sequences' cells; False (their sequences ended) if it
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
        self._failed(rc, list({id(row.seq): row.seq for row in rows}.values()), out)
        return False

    def _continuing(self, rows: list[Row], out: StepOutput) -> list[Row]:
        """The rows whose sequence's cells end right before them. llama.cpp refuses a whole call where one sequence's
        rows do not continue its cells (a recurrent state that a cut could not move back): that sequence ends here,
        so the call goes on for the others; planning keeps this from happening at all."""
        starts: dict[Sequence, int] = {}
        for row in rows:
            starts.setdefault(row.seq, row.pos)
        broken = {seq for seq, pos in starts.items()
                  if last_position(self.model.memory, seq.slot) != seq.positions.held_end(pos)}
        for seq in broken:
            ends = last_position(self.model.memory, seq.slot)
            log.error("rows_not_continuing", slot=seq.slot, cells_end=ends + 1, rows_start=starts[seq],
                      request_id=seq.request.request_id)
            out.end(seq, FinishReason.ERROR, f"its cells end at position {ends + 1}, its next row is token "
                                             f"{starts[seq]}'s")
        return [row for row in rows if row.seq not in broken] if broken else rows

    def _decode_image(self, seq: Sequence, span: MediaSpan, start: int, end: int, logits_last: bool,
                      out: StepOutput) -> bool:
        """One llama_decode of the image's embeddings for tokens start..end (encoded on the encoder thread since
        the sequence's admission: planning waits for them); False (the sequence ended) if either failed."""
        batch, projector = self._embd_batch, self.projector
        assert batch is not None and projector is not None  # only an engine with a projector takes images
        if not self._continuing([Row(-1, start, seq, False)], out):  # (its rows must go on from its cells too)
            return False
        try:
            embeddings = seq.embeddings[span.start].result()
        except (RuntimeError, MemoryError) as failed:
            log.error("image_encode_failed", why=str(failed), request_id=seq.request.request_id)
            out.end(seq, FinishReason.ERROR, str(failed))
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
        self._failed(rc, [seq], out)
        return False

    def _failed(self, rc: int, sequences: list[Sequence], out: StepOutput) -> None:
        """Nothing of a failed call can be trusted: end its sequences, keep serving the others."""
        log.error("decode_failed", status=rc, sequences=len(sequences))
        for seq in sequences:
            out.end(seq, FinishReason.ERROR, f"llama_decode failed with status {rc}")

    def _llama_decode(self, batch: llama_cpp.llama_batch) -> int:
        """llama_decode, timed; it carries out the stream copies asked for before it."""
        started = time.perf_counter()
        rc = llama_cpp.llama_decode(self.model.ctx, batch)
        self.decode_s += time.perf_counter() - started
        self.cells.decoded()
        return rc
