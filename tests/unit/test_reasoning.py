"""A thinking model's <think>…</think> apart from its answer: the splitter alone, fed as tokens arrive."""

from __future__ import annotations

import pytest

from worker.engine.output.detokenizer import StreamingText
from worker.engine.output.reasoning import ThinkingSplit


def split(pieces: list[str], opened: bool, stop: tuple[str, ...] = ()) -> tuple[str, str, str | None]:
    """(reasoning, answer, matched stop) after feeding `pieces` one at a time, as tokens arrive."""
    text = StreamingText(stop, ThinkingSplit(opened))
    answer, reasoning = [], []
    for piece in pieces:
        answer.append(text.feed(piece.encode()))
        reasoning.append(text.take_reasoning())
        if text.matched:
            break
    else:
        answer.append(text.flush())
        reasoning.append(text.take_reasoning())
    return "".join(reasoning), "".join(answer), text.matched


@pytest.mark.parametrize("pieces", [
    ["Let me see.</think>The answer is 4."],
    ["Let", " me see.<", "/th", "ink", ">", "\n\n", "The answer", " is 4."],  # the tag cut across tokens
    list("Let me see.</think>\nThe answer is 4."),
])
def test_reasoning_opened_by_the_prompt(pieces):
    assert split(pieces, opened=True) == ("Let me see.", "The answer is 4.", None)


def test_reasoning_opened_by_the_output():
    assert split(["\n<th", "ink>", "hmm", "</think>", " ok"], opened=False) == ("hmm", "ok", None)


def test_an_answer_that_only_starts_like_a_tag_is_all_answer():
    assert split(["<", "b>bold</b>"], opened=False) == ("", "<b>bold</b>", None)
    assert split(["Plain ", "text </think> here"], opened=False) == ("", "Plain text </think> here", None)


def test_reasoning_that_never_closes_is_all_reasoning():
    assert split(["thinking", " on </thi"], opened=True) == ("thinking on </thi", "", None)


def test_stop_strings_apply_to_the_answer_only():
    reasoning, answer, matched = split(["I will say STOP", " later.</think>", "Fine STOP", " here"], opened=True,
                                       stop=("STOP",))
    assert (reasoning, answer, matched) == ("I will say STOP later.", "Fine ", "STOP")
