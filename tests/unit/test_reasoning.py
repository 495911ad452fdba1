"""A thinking model's reasoning and answer told apart as tokens arrive: the phase tracker alone, with the tags of a
few chat formats as llama.cpp's chat layer gives them. The text itself passes through whole."""

from __future__ import annotations

import pytest

from worker.engine.output.detokenizer import StreamingText
from worker.engine.output.reasoning import ReasoningPhase
from worker.engine.requests import Reasoning

THINK = Reasoning("<think>", ("</think>",), opened_in_prompt=False, end_tokens=())
GPT_OSS = Reasoning("<|channel|>analysis<|message|>", ("<|end|>",), opened_in_prompt=False, end_tokens=())


def split(pieces: list[str], reasoning: Reasoning, opened: bool = False,
          stop: tuple[str, ...] = ()) -> tuple[str, str, str | None]:
    """(the reasoning's text, the answer's text, the matched stop) after feeding `pieces` one at a time, as tokens
    arrive; what the tracker passes on must add up to the text as written (up to a stop string)."""
    phase = ReasoningPhase(Reasoning(reasoning.start_tag, reasoning.end_tags, opened, ()))
    text = StreamingText(stop, phase)
    thought, answered, released = [], [], []
    for piece in pieces:
        was_reasoning = phase.in_reasoning
        out = text.feed(piece.encode())
        released.append(out)
        (thought if was_reasoning or phase.in_reasoning else answered).append(out)
        if text.matched:
            break
    else:
        released.append(text.flush())
        answered.append(released[-1])
    if text.matched is None:
        assert "".join(released) == "".join(pieces)
    return "".join(thought), "".join(answered), text.matched


def test_the_text_passes_through_whole_and_the_phase_follows_the_tags():
    phase = ReasoningPhase(THINK)
    assert not phase.in_reasoning  # before the output opens a reasoning, it is the answer's
    assert phase.feed("\n<th") == ("", "")  # may still be the start tag: held
    assert phase.feed("ink>hmm") == ("\n<think>hmm", "")
    assert phase.in_reasoning
    assert phase.feed("</") == ("</", "")  # passed on: an end tag cut across pieces is found later
    assert phase.feed("think>\n\nYes") == ("think>", "\n\nYes")
    assert not phase.in_reasoning and phase.feed(" no <think>") == ("", " no <think>")


@pytest.mark.parametrize("pieces", [
    ["Let me see.</think>The answer is 4."],
    ["Let", " me see.<", "/th", "ink", ">", "\n\n", "The answer", " is 4."],  # the tag cut across tokens
    list("Let me see.</think>\nThe answer is 4."),
])
def test_reasoning_opened_by_the_prompt(pieces):
    thought, answer, _ = split(pieces, THINK, opened=True)
    assert thought.endswith("</think>") and answer.strip() == "The answer is 4."


def test_an_answer_that_only_starts_like_a_tag_is_all_answer():
    assert split(["<", "b>bold</b>"], THINK) == ("", "<b>bold</b>", None)
    assert split(["Plain ", "text </think> here"], THINK) == ("", "Plain text </think> here", None)


def test_gpt_oss_analysis_channel_is_the_reasoning():
    pieces = ["<|channel|>", "analysis", "<|message|>", "Think", "ing.", "<|end|>", "<|start|>", "assistant",
              "<|channel|>final<|message|>", "Hi"]
    thought, answer, _ = split(pieces, GPT_OSS)
    assert thought == "<|channel|>analysis<|message|>Thinking.<|end|>"
    assert answer == "<|start|>assistant<|channel|>final<|message|>Hi"


def test_stop_strings_apply_to_the_answer_only():
    thought, answer, matched = split(["I will say STOP", " later.</think>", "Fine STOP", " here"], THINK,
                                     opened=True, stop=("STOP",))
    assert (thought, answer, matched) == ("I will say STOP later.</think>", "Fine ", "STOP")
