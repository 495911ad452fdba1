"""Per-token output without a model: stop strings across token boundaries, budget forcing, logprob release."""

from __future__ import annotations

from worker.engine.core.token_output import TokenOutput, finished_event, forced_token
from worker.engine.output.detokenizer import StreamingText
from worker.engine.output.reasoning import ReasoningPhase
from worker.engine.requests import FinishReason, Reasoning, Request, SamplingParams, TokenLogprob
from worker.engine.sequence import Sequence

EOS = 0
# A toy vocabulary: token ids -> the bytes they spell. "€" is split over two tokens.
PIECES = {1: b"Hel", 2: b"lo W", 3: b"or", 4: b"ld!", 5: b" \xe2\x82", 6: b"\xac", 7: b"<think>", 8: b"hmm",
          9: b"</", 10: b"think>", 11: b"Yes", 12: b"<|call|>"}
PRESERVED = 12  # a control token the format writes its calls with: shown only where the request preserves it
THINKING = Reasoning("<think>", ("</think>",), opened_in_prompt=False, end_tokens=(9, 10))


class RecordingSampler:
    """Stands in for the native chain: the output only tells it which tokens were written for it."""

    def __init__(self) -> None:
        self.accepted: list[int] = []

    def accept(self, token: int) -> None:
        self.accepted.append(token)


def output() -> TokenOutput:
    return TokenOutput(lambda token: token == EOS, lambda token: b"" if token == PRESERVED else PIECES[token],
                       PIECES.__getitem__)


def sequence(max_tokens: int = 16, stop: tuple[str, ...] = (), budget: int | None = None,
             thinking: bool = False, preserved: frozenset[int] = frozenset()) -> Sequence:
    request = Request([1, 2, 3], max_tokens, SamplingParams(reasoning_budget=budget), stop=stop,
                      reasoning=THINKING if thinking else None, preserved_tokens=preserved)
    seq = Sequence(request)
    seq.text = StreamingText(stop, ReasoningPhase(THINKING) if thinking else None)
    seq.sampler = RecordingSampler()
    return seq


def run(seq: Sequence, tokens: list[int]) -> tuple[str, FinishReason | None]:
    texts, reason, out = [], None, output()
    for step, token in enumerate(tokens):
        event, reason = out.append(seq, token, now=float(step + 1))
        if event is not None:
            texts.append(event.text)
        if reason is not None:
            break
    return "".join(texts), reason


def test_a_stop_string_split_over_tokens_ends_the_answer_before_it():
    seq = sequence(stop=("World",))
    text, reason = run(seq, [1, 2, 3, 4])
    assert (text, reason) == ("Hello ", FinishReason.STOP)
    assert seq.text.matched == "World"
    assert len(seq.generated) == 4  # "ld!" completes it: its "!" after the stop string is not output either


def test_a_possible_stop_prefix_is_held_back_then_released_when_it_does_not_match():
    seq = sequence(stop=("Worm",))
    out = output()
    first, _ = out.append(seq, 1, 1.0)
    second, _ = out.append(seq, 2, 2.0)  # "lo W": "W" may start "Worm"
    third, reason = out.append(seq, 3, 3.0)  # "or": still "Wor"
    fourth, _ = out.append(seq, 4, 4.0)  # "ld!": not "Worm" after all
    assert [e.text if e else None for e in (first, second, third, fourth)] == ["Hel", "lo ", None, "World!"]
    assert reason is None


def test_a_character_split_over_tokens_is_released_whole():
    seq = sequence()
    out = output()
    half, _ = out.append(seq, 5, 1.0)
    whole, _ = out.append(seq, 6, 2.0)
    assert half.text == " " and whole.text == "€"


def test_max_tokens_ends_with_length_and_flushes_what_was_held():
    seq = sequence(max_tokens=2, stop=("World",))
    text, reason = run(seq, [1, 2])
    assert (text, reason) == ("Hello W", FinishReason.LENGTH)


def test_end_of_generation_flushes_and_is_counted():
    seq = sequence(stop=("Wx",))
    text, reason = run(seq, [1, 2, EOS])
    assert (text, reason) == ("Hello W", FinishReason.EOS)
    finished = finished_event(seq, reason, "")
    assert (finished.completion_tokens, finished.prompt_tokens, finished.stop_sequence) == (3, 3, None)
    assert finished.decode_s == 2.0  # first token at 1, last at 3


def test_a_spent_reasoning_budget_writes_the_end_tag_token_by_token():
    seq = sequence(budget=2, thinking=True)
    seq.thought = 1
    assert forced_token(seq, reasoning=True) is None  # budget not spent: the chain samples
    seq.thought = 2
    assert forced_token(seq, reasoning=True) == 9
    assert forced_token(seq, reasoning=True) == 10  # the rest of the tag
    assert forced_token(seq, reasoning=False) is None  # the tag closed the reasoning: the chain samples
    assert seq.sampler.accepted == [9, 10]  # the chain (penalties, grammar) sees what was written


def test_no_budget_or_no_reasoning_never_forces():
    for seq, reasoning in ((sequence(budget=None, thinking=True), True), (sequence(budget=0), False)):
        seq.thought = 100
        assert forced_token(seq, reasoning) is None
        assert seq.sampler.accepted == []


def test_reasoning_is_released_as_written_and_stop_strings_skip_it():
    seq = sequence(thinking=True, stop=("hmm",))
    out = output()
    events = [out.append(seq, token, float(i))[0] for i, token in enumerate([7, 8, 9, 10, 11])]
    assert "".join(e.text for e in events if e) == "<think>hmm</think>Yes"
    assert seq.text.matched is None


def test_a_preserved_control_token_shows_its_text_and_others_none():
    assert run(sequence(preserved=frozenset({PRESERVED})), [11, PRESERVED])[0] == "Yes<|call|>"
    assert run(sequence(), [11, PRESERVED])[0] == "Yes"


def _entry(piece: bytes) -> TokenLogprob:
    return TokenLogprob(piece, -0.5, ())


def test_logprobs_are_released_with_their_text_and_not_for_a_stop_string():
    seq = sequence(stop=("World",))
    out = output()
    seq.logprobs.append(_entry(PIECES[1]))
    first, _ = out.append(seq, 1, 1.0)
    assert [e.piece for e in first.logprobs] == [b"Hel"]
    seq.logprobs.append(_entry(PIECES[2]))
    second, _ = out.append(seq, 2, 2.0)  # "lo " released, "W" held: the entry goes with the released text
    seq.logprobs.append(_entry(PIECES[3]))
    third, _ = out.append(seq, 3, 3.0)
    assert third is None  # nothing released, so its entry waits
    seq.logprobs.append(_entry(PIECES[4]))
    last, reason = out.append(seq, 4, 4.0)
    assert reason is FinishReason.STOP
    released = [e.piece for e in second.logprobs] + [e.piece for e in (last.logprobs if last else ())]
    assert released == [b"lo W"]  # the tokens that spelled the stop string are not reported
