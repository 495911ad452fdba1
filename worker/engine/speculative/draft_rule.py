"""Speculative decoding's rule: how many drafted tokens each sequence puts in a step, from what they cost and how
often they are accepted. Free of llama_cpp; the runner verifies, prompt_lookup.py and draft_model.py propose
(docs/speculative.md, "How much to draft: measured, per step")."""

from __future__ import annotations

from dataclasses import dataclass, field

from worker.engine.speculative.prompt_lookup import TokenHistory

# Weight of the newest observation in a pass's running cost.
COST_SMOOTHING = 0.2
# A kind of draft's acceptance: accepted and rejected drafts are counted with this decay per verified draft, and
# per proposal not drafted, so a kind that stopped drafting tries again later (an exponential back-off: its
# estimate drifts back to the prior).
ACCEPTANCE_DECAY = 0.9
# A draft must promise this much more of the step's tokens per second than the step without it: the estimates are
# rough, and a draft that only breaks even on paper loses on average (open-ended answers, bench/speculative.py).
MARGIN = 0.15
# How many tokens' worth a kind of draft's prior acceptance counts (see Acceptance).
PRIOR_WEIGHT = 2.0
# How much longer than the plain step a call may take for drafts without counting as slowing the rows that gain
# least from them (plan_drafts): the spread of a pass's measured cost, not a budget for slowing anyone.
SLOWER_BY = 0.02
# How long a call with drafts may take, at most: the longer of the two. A stream's tokens come a step at a time, so
# a long call is a pause in every stream it carries, however many tokens it then yields. It binds where a pass's
# cost per row falls with its rows; on 2 cores with the test model the costs already keep drafts within it
# (docs/speculative.md, "How much to draft: measured, per step").
DRAFT_CALL_MAX_S = 0.1
DRAFT_CALL_STRETCH = 4.0


@dataclass
class Acceptance:
    """How likely a drafted token is to be accepted: a geometric model's estimate from decayed counts (tokens
    accepted; drafts cut short by a rejected token), with a prior. Kept for each kind of draft (an n-gram size, a
    draft model) over all sequences, and for each sequence, whose prior is its draft kind's rate: the kind says
    what such drafts are worth on this model, the sequence whether its own text is one that copies."""

    prior: float = 0.0
    accepted: float = 0.0
    rejected: float = 0.0

    @property
    def rate(self) -> float:
        return self.rate_over(self.prior)

    def rate_over(self, prior: float) -> float:
        return (self.accepted + prior * PRIOR_WEIGHT) / (self.accepted + self.rejected + PRIOR_WEIGHT)

    def observe(self, drafted: int, accepted: int) -> None:
        self.skipped()
        self.accepted += accepted
        self.rejected += accepted < drafted

    def skipped(self) -> None:
        """A draft not verified: what is known counts for less (the estimate drifts back to the prior)."""
        self.accepted *= ACCEPTANCE_DECAY
        self.rejected *= ACCEPTANCE_DECAY

    def learn(self, right: bool) -> None:
        """One more token of a draft observed as it comes (a Shadow's): right, or the one that cut it short."""
        if right:
            self.accepted += 1
        else:
            self.rejected += 1


def expected_tokens(rate: float, drafted: int) -> float:
    """Tokens a draft of `drafted` adds on average: the first is accepted with `rate`, each next one too if the
    one before was."""
    if rate >= 1.0:
        return float(drafted)
    return rate * (1 - rate ** drafted) / (1 - rate)


def micro_batches(rows: list[tuple[int, int]]) -> list[int]:
    """How llama.cpp's split_equal cuts a decode call of (slot, rows) sequences, in slot order, with one KV stream
    per slot: each micro-batch takes a run of slots numbered one after another and the same number of rows from
    each, as many as the run's shortest has left. The rows of each micro-batch, in order."""
    first, last = rows[0][0], rows[-1][0]
    if last - first == len(rows) - 1 and all(n == rows[0][1] for _, n in rows):  # most calls: one pass
        return [rows[0][1] * len(rows)]
    left = [[slot, n] for slot, n in rows if n > 0]
    passes = []
    while left:
        run = [left[0]]
        for entry in left[1:]:
            if entry[0] != run[-1][0] + 1:
                break
            run.append(entry)
        take = min(n for _, n in run)
        for entry in run:
            entry[1] -= take
        passes.append(take * len(run))
        left = [entry for entry in left if entry[1] > 0]
    return passes


# Serving found a one-row pass below this share of its timed cost: the passes were timed beside a busy process.
TIMED_BESIDE_LOAD_BELOW = 0.75


@dataclass
class PassCosts:
    """What one pass over the weights costs by the rows it holds, as measured on this machine: the passes a step
    with drafts makes are timed on purpose (core/draft_passes.py: before serving, and again when idle), and every
    llama_decode of one micro-batch (decode steps, prefill chunks) updates its row count's running average."""

    seconds: dict[int, float] = field(default_factory=dict)
    timed_one: float | None = None  # a one-row pass, as last timed on purpose
    _estimates: dict[int, float | None] = field(default_factory=dict)  # of(), until the next observation

    def observe(self, rows: int, seconds: float) -> None:
        old = self.seconds.get(rows)
        self.seconds[rows] = seconds if old is None else old + COST_SMOOTHING * (seconds - old)
        self._estimates.clear()

    def timed(self, rows: int, seconds: float) -> None:
        """A pass timed on purpose: its cost from now on, whatever serving measured before."""
        self.seconds[rows] = seconds
        if rows == 1:
            self.timed_one = seconds
        self._estimates.clear()

    @property
    def milliseconds(self) -> dict[int, float]:
        """Each row count's cost in ms, for the log."""
        return {rows: round(seconds * 1e3, 1) for rows, seconds in sorted(self.seconds.items())}

    def timed_beside_load(self) -> bool:
        """Whether serving finds a one-row pass well below its timed cost: the passes were timed beside a busy
        process, so the multi-row ones are too high as well (every pass 1.5-2x, bench/probes/passtiming.py), and a
        row count that looks too costly to draft is never run by a step that would time it again: the worker would
        serve without drafts for good."""
        live = self.seconds.get(1)
        return self.timed_one is not None and live is not None and live < TIMED_BESIDE_LOAD_BELOW * self.timed_one

    def of(self, rows: int) -> float | None:
        """A pass of `rows`: measured, else between the nearest measured row counts (a straight line), else
        beyond the largest at its cost per row; None before anything was measured."""
        if rows in self.seconds:
            return self.seconds[rows]
        if rows not in self._estimates:
            self._estimates[rows] = self._estimate(rows)
        return self._estimates[rows]

    def _estimate(self, rows: int) -> float | None:
        below = max((n for n in self.seconds if n < rows), default=None)
        above = min((n for n in self.seconds if n > rows), default=None)
        if above is None:
            return None if below is None else self.seconds[below] * rows / below
        if below is None:
            return self.seconds[above] * rows / above
        share = (rows - below) / (above - below)
        return self.seconds[below] + share * (self.seconds[above] - self.seconds[below])

    def of_call(self, rows: list[tuple[int, int]]) -> float | None:
        costs = [self.of(n) for n in micro_batches(rows)]
        known = [cost for cost in costs if cost is not None]
        return sum(known) if len(known) == len(costs) else None


# The draft lengths plan_drafts weighs (and a proposal's own length): finer where a row more or less matters most.
# Weighing every length cost 0.4 ms a step with four sequences drafting, a step being ~20 ms.
DRAFT_LENGTHS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)


def _counts(least: int, most: int) -> list[int]:
    return [n for n in DRAFT_LENGTHS if least <= n < most] + ([most] if most >= least else [])


@dataclass(frozen=True)
class Candidate:
    slot: int
    available: int  # tokens the sequence could draft now (its proposal's length, its budget)
    rate: float  # its acceptance estimate


def plan_drafts(slots: list[int], candidates: list[Candidate], costs: PassCosts, least: int) -> dict[int, int]:
    """How many tokens each candidate drafts this step (slot -> count; absent: none).

    A draft rides in the step's decode call behind its sequence's row, so k drafted tokens are k more rows: on the
    CPU rows are not free, and unequal rows split the call into more passes over the weights (micro_batches;
    bench/probes/RESULTS.md, "Verifying drafts"). So a draft is worth its rows only when the tokens it is expected
    to add beat the step's own rate, with the costs measured on this machine (PassCosts) and each sequence's
    acceptance so far (Acceptance).

    `slots`: every decode row's slot, in order; `least`: --draft-min. Weighed: the most promising j candidates
    (by acceptance) all drafting the same count, for each j and count; the same count keeps the call one pass over
    the weights where their slots are neighbours. An option may not slow any sequence down: each decode row's
    expected tokens per second with it must be at least its rate without it (within SLOWER_BY), so a draft that
    lengthens the call must promise every row beside it more than one token; where extra rows cost time (the
    CPU) only steps where every sequence drafts qualify. Of those, the option with the most expected tokens per
    second is taken if it beats the step without drafts by MARGIN; none may take longer than DRAFT_CALL_MAX_S or
    DRAFT_CALL_STRETCH plain calls, whichever is longer. Until the costs are measured nobody drafts."""
    base = costs.of_call([(slot, 1) for slot in slots])
    if base is None:
        return {}
    least = max(1, least)
    ranked = sorted(candidates, key=lambda c: -c.rate)
    best, best_rate = {}, (1 + MARGIN) * len(slots) / base
    slowest = base * (1 + SLOWER_BY)  # a call one token a row is worth
    longest = max(DRAFT_CALL_MAX_S, DRAFT_CALL_STRETCH * base)  # a pause every stream in the call would see
    for j in range(1, len(ranked) + 1):
        top = ranked[:j]
        for count in _counts(least, max(c.available for c in top)):
            counts = {c.slot: min(count, c.available) for c in top}
            gains = [expected_tokens(c.rate, counts[c.slot]) for c in top]
            cost = costs.of_call([(slot, 1 + counts.get(slot, 0)) for slot in slots])
            assert cost is not None  # some pass was measured (base), so every pass has an estimate
            fewest = 1 + (min(gains) if j == len(slots) else 0.0)  # tokens of the row that gains least
            if cost > slowest * fewest or cost > longest:
                continue
            rate = (len(slots) + sum(gains)) / cost
            if rate > best_rate:
                best, best_rate = counts, rate
    return best


# The check on the rule's estimates under load: decode steps' tokens per second, with drafts and without, by the
# number of decode rows. Where drafting steps yielded less, drafts are planned only every EXPLORE_EVERY-th step
# at that load, to find out whether that still holds. One decode row is left to the estimates, which held there,
# but for a draft model, whose own decodes they do not weigh (docs/speculative.md, "How much to draft: measured,
# per step").
YIELD_SMOOTHING = 0.3
EXPLORE_EVERY = 8


@dataclass
class StepYields:
    """Tokens per second of decode steps, by decode rows: with drafts and without."""

    from_rows: int = 2  # the least load it holds drafts back at (1: also a single stream)
    plain: dict[int, float] = field(default_factory=dict)
    drafted: dict[int, float] = field(default_factory=dict)
    _held_back: dict[int, int] = field(default_factory=dict)  # steps not drafted since the last try, by load

    def observe(self, rows: int, tokens: int, seconds: float, drafted: bool) -> None:
        table = self.drafted if drafted else self.plain
        rate, old = tokens / seconds, table.get(rows)
        table[rows] = rate if old is None else old + YIELD_SMOOTHING * (rate - old)

    def worth_trying(self, rows: int) -> bool:
        """Whether drafts may be planned at this load: not where drafting steps measured slower, but now and then."""
        plain, drafted = self.plain.get(rows), self.drafted.get(rows)
        if rows < self.from_rows or drafted is None:
            return True
        if plain is None:  # drafting at every step (a draft model always offers): one plain step to compare
            return False
        if drafted >= plain:
            return True
        held = self._held_back[rows] = self._held_back.get(rows, 0) + 1
        if held < EXPLORE_EVERY:
            return False
        self._held_back[rows] = 0
        return True


@dataclass(frozen=True)
class Offer:
    """What a sequence could draft now: `count` tokens of a kind (the proposer's: an n-gram size), and the tokens
    themselves where finding them cost nothing (prompt lookup; a draft model drafts only the counts asked for)."""

    kind: int
    count: int
    tokens: list[int] | None = None


@dataclass
class Shadow:
    """An offer that was not drafted, held against the tokens the sequence goes on to generate: how many of them
    it would have had accepted, learnt at no cost. Without it a sequence that stopped drafting learns nothing
    until its estimate decays back: in a copying answer, one rejected draft then held back the next 10-20 steps
    of copying (bench/speculative.py)."""

    kind: int
    tokens: list[int]
    matched: int = 0


@dataclass
class DraftState:
    """One sequence's drafting: what it has searchable (prompt lookup), how its drafts fared."""

    history: TokenHistory | None  # prompt + output, for prompt lookup; None when a draft model proposes
    kind: int = 0  # the kind of its draft in this step (the proposer's: an n-gram size)
    acceptance: Acceptance = field(default_factory=Acceptance)  # its own drafts' (rate_over its kind's rate)
    shadow: Shadow | None = None
    drafted: int = 0  # drafted tokens verified
    accepted: int = 0  # of those, accepted
