"""What one sampled token adds to a request's answer: its text, its released log probabilities, and whether the
answer ends there (the step's update, core/step_update.py); and the end of thinking for a reasoning that spent its
budget (written by the runner in place of a sample). No llama.cpp: the model enters as three lookups (end of
generation, a token's bytes, a control token's text), so the rules run in unit tests without a model."""

from __future__ import annotations

import time
from collections.abc import Callable

from worker.engine.requests import Finished, FinishReason, TokenEvent, TokenLogprob
from worker.engine.sequence import Sequence


class TokenOutput:
    def __init__(self, is_eog: Callable[[int], bool], piece: Callable[[int], bytes],
                 special_piece: Callable[[int], bytes]) -> None:
        self._is_eog = is_eog
        self._piece = piece  # a token's bytes as the output writes them: control tokens write none
        self._special_piece = special_piece  # with control tokens' text: the request's preserved tokens

    def append(self, seq: Sequence, token: int, now: float) -> tuple[TokenEvent | None, FinishReason | None]:
        """Add the token to the answer: the event that carries what it releases (None: nothing yet, e.g. a stop
        string's possible prefix held back), and why the answer ends here (None: it goes on)."""
        seq.generated.append(token)
        seq.last_token_at = now
        if len(seq.generated) == 1:
            seq.first_token_at = now
        text = seq.text
        if self._is_eog(token):
            reason: FinishReason | None = FinishReason.EOS
            out = text.flush()
        else:
            special = token in seq.request.preserved_tokens
            out = text.feed(self._special_piece(token) if special else self._piece(token))
            if text.matched is not None:
                reason = FinishReason.STOP
            elif len(seq.generated) >= seq.request.max_tokens:
                reason = FinishReason.LENGTH
                out += text.flush()
            else:
                reason = None
        if not out:
            return None, reason
        return TokenEvent(out, len(seq.generated), released(seq, out, reason)), reason


def forced_token(seq: Sequence, reasoning: bool) -> int | None:
    """The end of thinking's next token, once the reasoning has spent its budget (None: sample).

    The request's end tag is written whole, one token a step, as if sampled (the logits row still scores it
    for logprobs); a grammar of the answer does not see it, one of the whole output does."""
    budget = seq.request.sampling.reasoning_budget
    thinking = seq.request.reasoning
    if not seq.forced and reasoning and thinking is not None and budget is not None and seq.thought >= budget:
        seq.forced = list(thinking.end_tokens)
    if not seq.forced:
        return None
    token = seq.forced.pop(0)
    sampler = seq.sampler
    assert sampler is not None  # a sequence that samples holds its chain
    sampler.accept(token)
    return token


def released(seq: Sequence, text: str, reason: FinishReason | None) -> tuple[TokenLogprob, ...]:
    """The pending logprob entries that `text` releases: all of them, but at a stop string only the
    tokens that reach into the released text (the rest spelled the stop string, which is not output)."""
    pending, seq.logprobs = seq.logprobs, []
    if reason is not FinishReason.STOP:
        return tuple(pending)
    covered, budget = [], len(text.encode())
    for entry in pending:
        if budget <= 0:
            break
        covered.append(entry)
        budget -= len(entry.piece)
    return tuple(covered)


def finished_event(seq: Sequence, reason: FinishReason, message: str) -> Finished:
    first = seq.first_token_at
    return Finished(
        reason=reason,
        prompt_tokens=len(seq.prompt),
        completion_tokens=len(seq.generated),
        cached_tokens=seq.cached,
        stop_sequence=seq.text.matched,
        message=message,
        queue_s=(seq.admitted_at or time.monotonic()) - seq.submitted_at,
        ttft_s=first - seq.submitted_at if first else 0.0,
        decode_s=seq.last_token_at - first if first else 0.0,
        draft_tokens=seq.draft.drafted if seq.draft else 0,
        draft_accepted=seq.draft.accepted if seq.draft else 0,
    )
