"""A thinking model's reasoning and answer told apart as tokens arrive: the phase tracker alone, with the tags of a
few chat formats as llama.cpp's chat layer gives them. The text itself passes through whole."""

from __future__ import annotations

import pytest

from worker.engine.output.detokenizer import StreamingText
from worker.engine.output.reasoning import ReasoningPhase
from worker.engine.requests import Reasoning

THINK = Reasoning("<think>", ("</think>",), opened_in_prompt=False, end_tokens=())
GPT_OSS = Reasoning("<|channel|>analysis<|message|>", ("<|end|>",), opened_in_prompt=False, end_tokens=())


def split(pieces: list[str], reasoning: Reasoning, opened: bool = False) -> tuple[str, str]:
    """(the reasoning's text, the answer's text) after feeding `pieces` one at a time, as tokens arrive; what the
    tracker passes on must add up to the text as written."""
    phase = ReasoningPhase(Reasoning(reasoning.start_tag, reasoning.end_tags, opened, ()))
    parts = [phase.feed(piece) for piece in pieces] + [phase.flush()]
    thought, answer = "".join(r for r, _ in parts), "".join(a for _, a in parts)
    assert thought + answer == "".join(pieces)
    return thought, answer


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
    thought, answer = split(pieces, THINK, opened=True)
    assert thought == "Let me see.</think>" and answer.strip() == "The answer is 4."


def test_an_answer_that_only_starts_like_a_tag_is_all_answer():
    assert split(["<", "b>bold</b>"], THINK) == ("", "<b>bold</b>")
    assert split(["Plain ", "text </think> here"], THINK) == ("", "Plain text </think> here")


def test_gpt_oss_analysis_channel_is_the_reasoning():
    pieces = ["<|channel|>", "analysis", "<|message|>", "Think", "ing.", "<|end|>", "<|start|>", "assistant",
              "<|channel|>final<|message|>", "Hi"]
    thought, answer = split(pieces, GPT_OSS)
    assert thought == "<|channel|>analysis<|message|>Thinking.<|end|>"
    assert answer == "<|start|>assistant<|channel|>final<|message|>Hi"


def test_stop_strings_apply_to_the_answer_only():
    text = StreamingText(("STOP",), ReasoningPhase(Reasoning("<think>", ("</think>",), True, ())))
    out = [text.feed(piece.encode()) for piece in ["I will say STOP", " later.</think>", "Fine STOP", " here"]]
    assert ("".join(out), text.matched) == ("I will say STOP later.</think>Fine ", "STOP")
