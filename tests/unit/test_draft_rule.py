"""The drafting rule, without a model (worker/engine/speculative/: draft_rule.py, prompt_lookup.py, speculator.py):
llama.cpp's passes, prompt lookup, drafts weighed by cost and acceptance, learnt from what follows, backed off and
tried again."""

from __future__ import annotations

from worker.engine.config import EngineConfig
from worker.engine.modes import SpecType
from worker.engine.requests import Request, SamplingParams
from worker.engine.sequence import Sequence
from worker.engine.speculative.draft_rule import (
    DRAFT_CALL_MAX_S,
    DRAFT_CALL_STRETCH,
    EXPLORE_EVERY,
    Acceptance,
    Candidate,
    PassCosts,
    StepYields,
    micro_batches,
    plan_drafts,
)
from worker.engine.speculative.prompt_lookup import TokenHistory
from worker.engine.speculative.speculator import RETIME_EVERY_S, PromptLookup, Speculator


def cpu_costs() -> PassCosts:
    """Pass costs as bench/probes/verifycost.py measured them on 2 cores (ms by rows)."""
    costs = PassCosts()
    for rows, ms in ((1, 6.3), (2, 12.4), (3, 15.9), (4, 18.9), (8, 29.5), (16, 49.0), (17, 52.0)):
        costs.observe(rows, ms / 1e3)
    return costs


def test_llama_cpp_splits_uneven_and_gapped_rows_into_passes():
    assert micro_batches([(0, 1), (1, 1), (2, 1), (3, 1)]) == [4]
    assert micro_batches([(0, 5), (1, 1), (2, 1), (3, 1)]) == [4, 4]  # split_equal: the same rows from each
    assert micro_batches([(0, 1), (2, 1)]) == [1, 1]  # slots one after another only
    assert micro_batches([(0, 5), (1, 5), (3, 2)]) == [10, 2]


def test_prompt_lookup_drafts_what_followed_the_longest_match():
    history = TokenHistory([9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4])
    assert history.proposal(3) == ([5, 6, 7], 4)
    history.append(5)
    assert history.proposal(16) == ([6, 7, 8, 1, 2, 3, 4, 5], 4)  # up to the end of the history
    assert TokenHistory([256, 1, 0, 0, 1]).proposal(3) == ([], 0)  # no match across token boundaries


def test_drafts_are_weighed_by_cost_and_acceptance():
    costs = cpu_costs()
    assert plan_drafts([0], [Candidate(0, 16, 0.95)], PassCosts(), 0) == {}  # nothing measured yet
    long = plan_drafts([0], [Candidate(0, 16, 0.97)], costs, 0)
    assert long[0] >= 8  # a copying sequence drafts long
    assert plan_drafts([0], [Candidate(0, 16, 0.6)], costs, 0) == {}  # an unlikely draft is not worth a row
    assert plan_drafts([0], [Candidate(0, 3, 0.97)], costs, 4) == {}  # shorter than --draft-min
    together = plan_drafts([0, 1, 2, 3], [Candidate(slot, 16, 0.97) for slot in range(4)], costs, 0)
    assert len(set(together.values())) == 1 and len(together) == 4  # the same count: one pass


def test_a_draft_never_slows_the_rows_beside_it():
    """A row more costs time (and a lone sequence's draft a pass of its own, split_equal): one sequence's draft
    would slow the three beside it, so at four rows only steps where every sequence drafts qualify."""
    costs = cpu_costs()
    assert plan_drafts([0, 1, 2, 3], [Candidate(2, 16, 0.99)], costs, 0) == {}
    assert plan_drafts([0, 1, 2, 3], [Candidate(slot, 16, 0.99) for slot in (0, 1, 2)], costs, 0) == {}
    assert len(plan_drafts([0, 1, 2, 3], [Candidate(slot, 16, 0.99) for slot in range(4)], costs, 0)) == 4
    assert plan_drafts([0], [Candidate(0, 16, 0.99)], costs, 0)  # alone, it slows nobody


def test_a_drafting_call_pauses_the_streams_it_carries_no_longer_than_the_cap():
    """Where a row costs less the more rows a pass holds (8 rows 20 ms, 136 rows 150 ms), eight copying sequences
    get the most tokens per second drafting 16 tokens each: 150 ms, a pause in every stream. The rule drafts what
    fits in DRAFT_CALL_MAX_S or DRAFT_CALL_STRETCH plain calls, and a lone sequence, whose longest draft is well
    under the cap, still drafts long."""
    costs, slots = PassCosts(), list(range(8))
    for rows, ms in ((1, 8.0), (8, 20.0), (136, 150.0)):
        costs.observe(rows, ms / 1e3)
    counts = plan_drafts(slots, [Candidate(slot, 16, 0.99) for slot in slots], costs, 0)
    assert len(counts) == 8 and 1 <= max(counts.values()) < 16, counts
    call, plain = costs.of_call([(slot, 1 + counts[slot]) for slot in slots]), costs.of_call([(s, 1) for s in slots])
    assert call is not None and plain is not None and call <= max(DRAFT_CALL_MAX_S, DRAFT_CALL_STRETCH * plain)
    assert plan_drafts([0], [Candidate(0, 16, 0.99)], costs, 0) == {0: 16}


def test_an_offer_not_drafted_is_learnt_from_the_tokens_that_follow():
    """A sequence whose drafts were rejected stops drafting; the n-gram offers it does not draft are held against
    the tokens it goes on to generate, so a copying run brings its drafts back within a few tokens."""
    text = list(range(100, 160))
    seq = Sequence(Request(prompt_tokens=text + text[:20], max_tokens=200), slot=0)
    speculator = Speculator(EngineConfig(spec_type=SpecType.NGRAM), PromptLookup())
    speculator.costs = cpu_costs()
    speculator.start(seq)
    seq.draft.acceptance.observe(drafted=8, accepted=0)
    assert speculator.drafts([seq]) == {}  # too often rejected to be worth a row
    assert seq.draft.shadow is not None
    low = seq.draft.acceptance.rate_over(0.9)
    copied = 0
    while not speculator.drafts([seq]):  # the answer goes on copying the prompt, one token a step
        token = text[20 + copied]
        seq.generated.append(token)
        speculator.generated(seq, token)
        copied += 1
        assert copied < 12
    assert seq.draft.acceptance.rate_over(0.9) > low
    wrong = Sequence(Request(prompt_tokens=text + text[:20], max_tokens=200), slot=1)
    speculator.start(wrong)
    wrong.draft.acceptance.observe(drafted=8, accepted=0)
    speculator.drafts([wrong])
    before = wrong.draft.acceptance.rate_over(0.9)
    speculator.generated(wrong, 7)  # not what the offer said
    assert wrong.draft.acceptance.rate_over(0.9) < before and wrong.draft.shadow is None


def test_sampled_answers_do_not_hold_back_the_drafts_of_greedy_requests():
    """Sampled answers keep few drafted tokens: what they teach the rule is kept apart from what greedy requests
    teach it, so after a burst of them a greedy request that copies drafts from its first step."""
    text = list(range(100, 160))
    speculator = Speculator(EngineConfig(spec_type=SpecType.NGRAM), PromptLookup())
    speculator.costs = cpu_costs()
    for _ in range(6):
        sampled = Sequence(Request(prompt_tokens=text + text[:20], max_tokens=200,
                                   sampling=SamplingParams(temperature=2.0)), slot=0)
        speculator.start(sampled)
        for _ in range(8):  # every draft, and every offer held against the tokens that follow, is wrong
            drafts = speculator.drafts([sampled])
            if drafts:
                speculator.verified(sampled, len(drafts[sampled]), 0)
            else:
                speculator.generated(sampled, 7)
    greedy = Sequence(Request(prompt_tokens=text + text[:20], max_tokens=200,
                              sampling=SamplingParams(temperature=0.0)), slot=0)
    speculator.start(greedy)
    assert greedy in speculator.drafts([greedy])


def test_a_rejected_draft_backs_off_and_is_tried_again_later():
    acceptance = Acceptance(prior=0.9)
    acceptance.observe(drafted=8, accepted=0)
    low = acceptance.rate
    assert low < 0.7
    for _ in range(30):
        acceptance.skipped()
    assert low < acceptance.rate <= 0.9


def test_drafting_that_measured_slower_at_a_load_is_only_tried_now_and_then():
    yields = StepYields()
    yields.observe(4, 4, 0.020, drafted=False)  # 200 tok/s without drafts at four rows
    yields.observe(4, 6, 0.040, drafted=True)  # 150 with
    yields.observe(1, 1, 0.006, drafted=False)
    yields.observe(1, 2, 0.024, drafted=True)
    assert yields.worth_trying(1)  # one row is left to the estimates
    tries = [yields.worth_trying(4) for _ in range(2 * EXPLORE_EVERY)]
    assert tries.count(True) == 2 and tries[EXPLORE_EVERY - 1]
    for _ in range(3):
        yields.observe(4, 20, 0.050, drafted=True)  # copying answers: 400 tok/s, and the average passes 200
    assert all(yields.worth_trying(4) for _ in range(3))
    drafting_model = StepYields(from_rows=1)  # a draft model's decodes: one row is checked too
    drafting_model.observe(1, 3, 0.030, drafted=True)  # its own decodes made drafting slower than...
    assert not drafting_model.worth_trying(1)  # ...what? a plain step is taken to find out
    drafting_model.observe(1, 1, 0.006, drafted=False)
    assert [drafting_model.worth_trying(1) for _ in range(EXPLORE_EVERY)].count(True) == 1


def test_passes_timed_beside_a_busy_process_are_timed_again_when_serving_shows_it():
    """A one-row pass that serving measures well below its timed cost says a busy process ran beside the timing:
    every row count is due to be timed again (idle, one a step), and then not again for RETIME_EVERY_S."""
    speculator = Speculator(EngineConfig(spec_type=SpecType.NGRAM, draft_max=4), PromptLookup())
    for rows, ms in ((1, 16.0), (2, 48.0), (3, 50.0), (4, 58.0), (5, 213.0)):  # timed beside a one-core hog
        speculator.costs.timed(rows, ms / 1e3)
    assert plan_drafts([0], [Candidate(0, 4, 0.95)], speculator.costs, 0) == {}  # no draft looks worth its rows
    speculator.costs.observe(1, 14.0e-3)  # serving, as costly: nothing is due
    assert speculator.pass_to_time_again(0.0) is None
    for _ in range(10):
        speculator.costs.observe(1, 6.5e-3)  # the neighbour is gone
    assert speculator.pass_to_time_again(0.0) == 1
    for rows, ms in ((1, 6.3), (2, 12.4), (3, 15.9), (4, 18.9), (5, 21.0)):
        assert speculator.pass_to_time_again(0.5) == rows
        assert speculator.timed_again(rows, ms / 1e3) is (rows == 5)
    assert speculator.pass_to_time_again(1.0) is None
    assert plan_drafts([0], [Candidate(0, 4, 0.95)], speculator.costs, 0) == {0: 4}
    speculator.costs.timed(1, 20e-3)  # timed beside a busy process again: due, but not before RETIME_EVERY_S
    assert speculator.costs.timed_beside_load() is False
    for _ in range(10):
        speculator.costs.observe(1, 6.5e-3)
    assert speculator.costs.timed_beside_load() and speculator.pass_to_time_again(RETIME_EVERY_S - 1) is None
    assert speculator.pass_to_time_again(RETIME_EVERY_S) == 1
    assert speculator.timed_again(1, None) is True  # a failed decode ends the round
    assert speculator.pass_to_time_again(RETIME_EVERY_S + 1) is None


def test_a_pass_timed_again_beside_a_busy_process_keeps_the_faster_timing():
    """Timing again while idle can meet a busier host than the first timing did: each row count keeps the faster of
    its timings, in the costs drafts are weighed by and in those kept for a restart; where serving still shows them
    too high, they are due again after RETIME_EVERY_S."""
    speculator = Speculator(EngineConfig(spec_type=SpecType.NGRAM, draft_max=2), PromptLookup())
    for rows, ms in ((1, 10.0), (2, 20.0), (3, 26.0)):  # timed at load beside a neighbour
        speculator.pass_timed(rows, ms / 1e3)
    for _ in range(10):
        speculator.costs.observe(1, 6.5e-3)
    assert speculator.pass_to_time_again(0.0) == 1
    for rows, ms in ((1, 12.0), (2, 14.0), (3, 40.0)):  # a busier neighbour now; 2 rows met a quiet moment
        assert speculator.pass_to_time_again(0.5) == rows
        speculator.timed_again(rows, ms / 1e3)
    assert speculator.timed_passes == {1: 10e-3, 2: 14e-3, 3: 26e-3}
    assert [speculator.costs.of(rows) for rows in (1, 2, 3)] == [10e-3, 14e-3, 26e-3]
    for _ in range(10):
        speculator.costs.observe(1, 6.5e-3)  # serving's steps, still well below the timing kept
    assert speculator.pass_to_time_again(RETIME_EVERY_S - 1) is None
    assert speculator.pass_to_time_again(RETIME_EVERY_S) == 1


def test_row_counts_startup_left_untimed_are_timed_first_once_idle():
    """Startup that ran out of time (busy cores) leaves row counts untimed: they weigh as estimates from the timed
    ones, are due at once when idle (before any RETIME_EVERY_S), and leave the list as each is timed."""
    speculator = Speculator(EngineConfig(spec_type=SpecType.NGRAM, draft_max=4), PromptLookup())
    speculator.costs.timed(1, 30e-3)
    speculator.untimed.extend([2, 3, 4, 5])
    assert speculator.costs.of(3) == 90e-3  # a row's cost each, until timed
    assert speculator.pass_to_time_again(0.0) == 2
    assert speculator.timed_again(2, 12e-3) is False and speculator.untimed == [3, 4, 5]
    for rows in (3, 4):
        assert speculator.pass_to_time_again(0.1) == rows
        speculator.timed_again(rows, rows * 5e-3)
    assert speculator.costs.of(3) == 15e-3
    assert speculator.timed_again(speculator.pass_to_time_again(0.2) or 0, 25e-3) is True
    assert speculator.untimed == [] and speculator.pass_to_time_again(0.3) is None


def test_the_passes_kept_for_a_restart_are_those_timed_on_purpose():
    """What a restart reuses (startup/check_record.py) is each row count's pass as timed at load or once idle, not
    serving's running averages; complete only once the row counts startup left untimed have been timed."""
    speculator = Speculator(EngineConfig(spec_type=SpecType.NGRAM, draft_max=2), PromptLookup())
    speculator.pass_timed(1, 30e-3)
    speculator.untimed.extend([2, 3])
    speculator.costs.observe(1, 10e-3)  # a decode step while serving
    assert not speculator.all_passes_timed
    for rows in (2, 3):
        assert speculator.pass_to_time_again(0.0) == rows
        speculator.timed_again(rows, rows * 20e-3)
    assert speculator.all_passes_timed and speculator.timed_passes == {1: 30e-3, 2: 40e-3, 3: 60e-3}
    assert speculator.costs.seconds[1] != 30e-3  # serving's average, which the kept costs leave out
