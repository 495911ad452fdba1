"""One request's life inside the engine: its state, its slot, its KV position and its output so far."""

from __future__ import annotations

import ctypes
import enum
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from worker.engine.output.detokenizer import StreamingText
from worker.engine.output.reasoning import ReasoningPhase
from worker.engine.positions import Positions
from worker.engine.requests import Request, TokenLogprob

if TYPE_CHECKING:
    from worker.engine.handle import RequestHandle
    from worker.engine.output.sampler import Sampler
    from worker.engine.speculative.draft_rule import DraftState


class SequenceState(enum.Enum):
    WAITING = "waiting"  # queued for a slot
    PREFILLING = "prefilling"  # in a slot, prompt not yet all in the KV stream
    FORKED = "forked"  # in a slot, waiting for its parent's prompt cells to be copied in
    DECODING = "decoding"  # one token a step
    FINISHED = "finished"  # left its slot; its Finished event is on the way


@dataclass(eq=False)
class Sequence:
    request: Request
    handle: RequestHandle | None = None  # where its events are delivered
    submitted_at: float = field(default_factory=time.monotonic)
    state: SequenceState = SequenceState.WAITING
    cancelled: bool = False
    slot: int = -1
    sampler: Sampler | None = None  # its native chain, while it holds a slot (runner.py: start to retire)
    text: StreamingText = field(init=False)  # its output's text so far, held to its request's stop strings
    positions: Positions = field(init=False)  # where its tokens sit in llama.cpp's positions
    n_past: int = 0  # leading tokens of prompt + generated already in the slot's KV stream
    cached: int = 0  # of the prompt, tokens whose KV the prefix cache supplied
    generated: list[int] = field(default_factory=list)  # sampled tokens; the last is not in the KV yet
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of tokens whose text is not released yet
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)  # of prompt tokens prefilled so far, when asked
    thought: int = 0  # tokens sampled inside a thinking model's reasoning, held to the sampling's reasoning_budget
    forced: list[int] = field(default_factory=list)  # the end-of-thinking marker's tokens still to write
    draft: DraftState | None = None  # speculative decoding's state; None: this sequence does not draft
    # Other choices of the same request (n > 1): admitted with this one, they get a copy of its
    # prompt's cells once it is prefilled, and sample their first token from the same logits.
    forks: list[Sequence] = field(default_factory=list)
    parent: Sequence | None = None  # for a fork: the sequence whose prompt it copies
    # An image's embeddings (by its span's start), encoded on the encoder thread from the sequence's admission until
    # its last token is in the KV (core/runner.py).
    embeddings: dict[int, Future[ctypes.Array]] = field(default_factory=dict)
    admitted_at: float = 0.0
    first_token_at: float = 0.0
    last_token_at: float = 0.0

    def __post_init__(self) -> None:
        reasoning = self.request.reasoning
        self.text = StreamingText(self.request.stop, ReasoningPhase(reasoning) if reasoning else None)
        self.positions = Positions.of_media(self.request.media)

    @property
    def prompt(self) -> list[int]:
        return self.request.prompt_tokens

    @property
    def deadline(self) -> float:
        timeout = self.request.timeout_s
        return self.submitted_at + timeout if timeout is not None else float("inf")

    def prefillable_until(self, start: int) -> int:
        """How far from `start` the prompt may be prefilled now: up to the first image still being encoded (all of
        the prompt where none is)."""
        for span in self.request.media:
            if span.end > start and not (span.start in self.embeddings and self.embeddings[span.start].done()):
                return max(start, span.start)
        return len(self.prompt)

    def waits_for_encoder(self) -> bool:
        """A prompt whose next token to prefill is an image still being encoded: no step has work for it (but to
        drop it, once cancelled)."""
        return (not self.cancelled and self.state is SequenceState.PREFILLING
                and self.prefillable_until(self.n_past) <= self.n_past)

    def draws_by_phase(self) -> bool:
        """Whether its next tokens are drawn by where its answer's text stands (a thinking model's reasoning under a
        grammar of the answer, or under a reasoning budget), which only the step's update reads, token by token: such
        a sequence drafts nothing until its answer has begun (core/runner.py)."""
        phase, sampler = self.text.phase, self.sampler
        if phase is None or phase.answering:
            return False
        return self.request.sampling.reasoning_budget is not None or (sampler is not None and sampler.reads_phase)

    def tokens_in_kv(self) -> list[int]:
        """The tokens whose KV cells this sequence's slot holds, in position order."""
        prompt = self.prompt
        if self.n_past <= len(prompt):
            return prompt[:self.n_past]
        return prompt + self.generated[:self.n_past - len(prompt)]
