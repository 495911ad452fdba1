"""A step's drafts: which decode rows carry drafted tokens behind them, and what each verified draft teaches. A kept
token is the one the sequence would have sampled anyway, so where a row's logits ignore the rows beside it drafts
cannot change the text (docs/speculative.md, "It never changes the text")."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Protocol

import structlog

from worker.engine.config import EngineConfig
from worker.engine.modes import SpecType
from worker.engine.speculative.draft_rule import (
    Acceptance,
    Candidate,
    DraftState,
    Offer,
    PassCosts,
    Shadow,
    StepYields,
    micro_batches,
    plan_drafts,
)
from worker.engine.speculative.prompt_lookup import NGRAM_PRIORS, TokenHistory
from worker.engine.speculative.sequence_view import DraftingSequence

log = structlog.get_logger(__name__)


class Proposer(Protocol):
    decodes: bool  # whether drafting runs decodes of its own (a draft model), which only StepYields measures

    @property
    def priors(self) -> dict[int, float]:
        """Each kind of draft's prior acceptance (draft_rule.Acceptance)."""

    def offer(self, seq: DraftingSequence, state: DraftState, limit: int) -> Offer:
        """What `seq` (drafting as `state` says) could draft now (at most `limit` tokens; a count of 0: nothing)."""

    def propose(self, chosen: dict[DraftingSequence, tuple[Offer, int]]) -> dict[DraftingSequence, list[int]]:
        """Each sequence's draft of (at most) the count chosen for its offer."""

    def close(self) -> None:
        """Free what it holds (a draft model's context)."""


class PromptLookup:
    """Drafts from the sequence's own prompt and output (prompt_lookup.py); a draft's kind is its n-gram's size. Finding
    a proposal costs ~3 us, so every offer carries its tokens."""

    priors = NGRAM_PRIORS
    decodes = False

    def offer(self, seq: DraftingSequence, state: DraftState, limit: int) -> Offer:
        history = state.history
        assert history is not None  # Speculator.start gives every state one under --spec-type ngram
        tokens, n = history.proposal(limit)
        return Offer(n, len(tokens), tokens)

    def propose(self, chosen: dict[DraftingSequence, tuple[Offer, int]]) -> dict[DraftingSequence, list[int]]:
        drafts = {}
        for seq, (offer, count) in chosen.items():
            assert offer.tokens is not None  # every offer above carries its tokens
            drafts[seq] = offer.tokens[:count]
        return drafts

    def close(self) -> None:
        pass


# Row counts whose passes are timed on purpose (core/draft_passes.py): the sizes a step with drafts makes, coarser
# as they grow.
TIMED_ROWS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
# Passes timed at load are timed again, idle, where serving showed that a busy process ran beside the first timing
# (PassCosts.timed_beside_load); at most this often, so that a machine busy by turns costs an idle worker little.
RETIME_EVERY_S = 60.0
# Startup times passes for at most this long: on a host whose cores are busy each pass costs many times its quiet
# cost, and a worker is ready when its model is. The row counts left are estimated from those timed
# (PassCosts.of) and timed once the worker is idle (pass_to_time_again).
TIMING_AT_LOAD_S = 3.0


# The proposer says what a sequence could draft, the rule (draft_rule.py) how much of it is worth the step's rows, and
# the runner verifies: it samples each row with the sequence's own chain and keeps drafted tokens while they equal
# what was sampled (whether rows ignore their neighbours: startup/load_check.py, verify_rows_exact).
class Speculator:
    def __init__(self, config: EngineConfig, proposer: Proposer, draft_max: int | None = None) -> None:
        """`draft_max`: the longest draft, where the model's memory undoes fewer tokens than --draft-max asks."""
        self.kind = config.drafting
        self.draft_max = config.draft_max if draft_max is None else draft_max
        self.draft_min = config.draft_min
        self.proposer = proposer
        self.costs = PassCosts()
        self._retiming: list[int] = []  # row counts left to time again
        self.untimed: list[int] = []  # row counts startup left untimed (TIMING_AT_LOAD_S), timed first once idle
        # Each row count's pass as last timed on purpose (serving's running averages apart): what a restart reuses.
        self.timed_passes: dict[int, float] = {}
        self._retimed_at = -RETIME_EVERY_S  # monotonic time the last timing again began
        self.yields = StepYields(from_rows=1 if proposer.decodes else 2)
        # Per kind, apart for greedy and sampled requests: a sampled answer keeps fewer drafted tokens, and a burst
        # of them must not hold back the drafts of greedy requests that copy (nor greedy ones inflate theirs).
        self.acceptance = {(kind, greedy): Acceptance(prior)
                           for kind, prior in proposer.priors.items() for greedy in (True, False)}

    @property
    def timed_rows(self) -> list[int]:
        """The row counts whose passes are timed: a decode row and each draft size up to --draft-max."""
        return [rows for rows in TIMED_ROWS if rows <= self.draft_max + 1]

    def pass_timed(self, rows: int, seconds: float) -> None:
        """A pass of `rows` timed on purpose: at load, once idle, or by an earlier start (startup/check_record.py)."""
        self.costs.timed(rows, seconds)
        self.timed_passes[rows] = seconds

    def time_passes_at_load(self, time_pass: Callable[[int], float | None], known: dict[int, float] | None) -> bool:
        """Time a pass of each row count a draft may make (`time_pass`, in an empty slot): drafting then weighs this
        machine's costs from the first step. Before any request, for at most TIMING_AT_LOAD_S: the row counts left
        are timed once idle, and said in the log and /health. `known` (an earlier start's, startup/check_record.py)
        stands for the timing where it has every row count. Returns whether every row count was timed here."""
        if known is not None and set(self.timed_rows) <= known.keys():
            for rows in self.timed_rows:
                self.pass_timed(rows, known[rows])
            log.info("passes_reused", ms=self.costs.milliseconds)
            return False
        deadline = time.perf_counter() + TIMING_AT_LOAD_S
        for rows in self.timed_rows:
            if time.perf_counter() > deadline:
                self.untimed.append(rows)
            elif (seconds := time_pass(rows)) is not None:
                self.pass_timed(rows, seconds)
        log.info("passes_timed", ms=self.costs.milliseconds, untimed=self.untimed)
        return self.all_passes_timed

    @property
    def all_passes_timed(self) -> bool:
        """Whether every row count's pass has been timed on purpose (none left estimated)."""
        return set(self.timed_rows) <= self.timed_passes.keys()

    def pass_to_time_again(self, now: float) -> int | None:
        """The next row count to time again while the engine is idle, where that is due; None: none is. The row
        counts startup left untimed are due at once."""
        if self.untimed and not self._retiming:
            self._retiming = list(self.untimed)
        if not self._retiming and self.costs.timed_beside_load() and now - self._retimed_at >= RETIME_EVERY_S:
            self._retiming, self._retimed_at = self.timed_rows, now
        return self._retiming[0] if self._retiming else None

    def timed_again(self, rows: int, seconds: float | None) -> bool:
        """The pass_to_time_again() row count's pass took `seconds` (None: its llama_decode failed, and the rest
        are left as they are). Returns whether that was the last one.

        A row count timed before keeps the faster of its two timings: a busy process beside a pass only ever slows it,
        and an idle worker on a busy host times again while others run (seen in a test run: every 60 s, each time
        slower, until a worker reusing those costs found no draft worth its rows)."""
        self._retiming.remove(rows)
        if seconds is None:
            self._retiming.clear()
            self.untimed.clear()  # not tried again: those row counts stay estimated
        else:
            self.pass_timed(rows, min(seconds, self.timed_passes.get(rows, seconds)))
            if rows in self.untimed:
                self.untimed.remove(rows)
        return not self._retiming

    def start(self, seq: DraftingSequence) -> None:
        """A sequence drafts unless its request turned drafting off (draft_max 0) or its prompt holds images (their
        stand-ins are no tokens to draft from or feed a draft model)."""
        if self._limit(seq) > 0 and not seq.request.media:
            history = TokenHistory(seq.prompt) if self.kind is SpecType.NGRAM else None
            seq.draft = DraftState(history)

    def _kind_acceptance(self, seq: DraftingSequence, kind: int) -> Acceptance:
        """What drafts of this kind are worth for requests sampled as `seq` is (greedy or not)."""
        return self.acceptance[kind, seq.request.sampling.temperature <= 0]

    def _limit(self, seq: DraftingSequence) -> int:
        asked = seq.request.sampling.draft_max
        return self.draft_max if asked is None else min(asked, self.draft_max)

    def drafts(self, decode: Collection[DraftingSequence]) -> dict[DraftingSequence, list[int]]:
        """This step's drafts, for some of the decode rows' sequences (in slot order)."""
        offers = self._offers(decode)
        trying = self.yields.worth_trying(len(decode))
        candidates = [Candidate(seq.slot, offer.count,
                                state.acceptance.rate_over(self._kind_acceptance(seq, offer.kind).rate))
                      for seq, (state, offer) in offers.items() if trying and offer.count >= max(1, self.draft_min)]
        counts = plan_drafts([seq.slot for seq in decode], candidates, self.costs, self.draft_min) if candidates \
            else {}
        chosen = {}
        for seq, (state, offer) in offers.items():
            if seq.slot in counts:
                state.kind, state.shadow = offer.kind, None
                chosen[seq] = offer, counts[seq.slot]
            else:
                self._not_drafted(seq, state, offer, trying)
        return self.proposer.propose(chosen) if chosen else {}

    def _offers(self, decode: Collection[DraftingSequence]) -> dict[DraftingSequence, tuple[DraftState, Offer]]:
        """What each drafting sequence could draft now, where it could draft anything (with its state)."""
        offers = {}
        for seq in decode:
            state = seq.draft
            if state is None:
                continue
            # Every kept draft token is one more generated token: never past max_tokens.
            room = min(self._limit(seq), seq.request.max_tokens - len(seq.generated) - 1)
            if room > 0 and (offer := self.proposer.offer(seq, state, room)).count > 0:
                offers[seq] = state, offer
        return offers

    def _not_drafted(self, seq: DraftingSequence, state: DraftState, offer: Offer, trying: bool) -> None:
        """An offer left out: held against the tokens to come where it has them (a Shadow), else nothing is
        learnt, and where the rule weighed it the estimates decay as after a verified draft, back to the prior."""
        if state.shadow is not None or (offer.tokens is None and not trying):
            return
        for estimate in self._kind_acceptance(seq, offer.kind), state.acceptance:
            estimate.skipped()
        if offer.tokens is not None:
            state.shadow = Shadow(offer.kind, offer.tokens)

    def generated(self, seq: DraftingSequence, token: int) -> None:
        """A drafting sequence's new token: searchable, and held against the offer it did not draft."""
        state = seq.draft
        assert state is not None  # the runner tells only of drafting sequences (Speculator.start gave them a state)
        if state.history is not None:
            state.history.append(token)
        if (shadow := state.shadow) is None:
            return
        # Learnt token by token, as they come: a copying run shows itself before the offer's end.
        right = token == shadow.tokens[shadow.matched]
        for estimate in self._kind_acceptance(seq, shadow.kind), state.acceptance:
            estimate.learn(right)
        shadow.matched += right
        if not right or shadow.matched == len(shadow.tokens):
            state.shadow = None

    def close(self) -> None:
        self.proposer.close()

    def verified(self, seq: DraftingSequence, drafted: int, accepted: int) -> None:
        state = seq.draft
        assert state is not None  # a sequence that drafted has its state
        self._kind_acceptance(seq, state.kind).observe(drafted, accepted)
        state.acceptance.observe(drafted, accepted)
        state.drafted += drafted
        state.accepted += accepted

    def observe_step(self, rows: int, tokens: int, seconds: float, drafted: bool) -> None:
        """A decode step of `rows` decode rows yielded `tokens` in `seconds` (its llama_decode, and the draft
        model's work when it has one)."""
        self.yields.observe(rows, tokens, seconds, drafted)

    def observe_call(self, rows: list[tuple[int, int]], seconds: float) -> None:
        """A llama_decode of (slot, rows) sequences took `seconds`: each of its passes' costs, the time shared
        between them as the estimates share it (a rough split, but one that keeps the costs of the passes a
        drafting step makes close to what they really take: rows far into a long context cost more)."""
        passes = micro_batches(rows)
        estimates = [self.costs.of(n) for n in passes]
        known = [estimate for estimate in estimates if estimate is not None]
        if len(passes) == 1 or len(known) < len(estimates):
            if len(passes) == 1:
                self.costs.observe(passes[0], seconds)
            return
        scale = seconds / sum(known)
        for n, estimate in zip(passes, known):
            self.costs.observe(n, estimate * scale)
