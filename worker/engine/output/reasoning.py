"""A thinking model's output (Qwen3, the DeepSeek-R1 distills), split into its reasoning (<think>…</think>) and its
answer, as llama.cpp's `deepseek` reasoning format splits it."""

from __future__ import annotations

import enum

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
# Written for the model when its reasoning_budget is spent: the tag, and the blank line thinking models write
# before their answer (which the split drops), so the answer that follows starts as it would have.
END_OF_THINKING = CLOSE_TAG + "\n\n"


def thinks(template: str | None) -> bool:
    """Whether a chat template is a thinking model's (it writes <think> itself, as llama.cpp detects it)."""
    return template is not None and OPEN_TAG in template


def opens_in_prompt(prompt: str) -> bool:
    """The template opened the reasoning at the end of the generation prompt."""
    return prompt.rstrip().endswith(OPEN_TAG)


class _Phase(enum.Enum):
    START = "start"  # the output may still open with <think>
    REASONING = "reasoning"
    ANSWER_START = "answer_start"  # after </think>: whitespace before the answer is dropped
    ANSWER = "answer"


def _partial_tag(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that begins `tag` (0 if none)."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ThinkingSplit:
    """Decoded text in; answer text out of `feed`, reasoning text gathered for `take_reasoning`.

    The reasoning opens in the prompt (the template ends the generation prompt with <think>, e.g. Qwen3 with
    enable_thinking) or at the very start of the output; everything up to </think> is reasoning, the rest is the
    answer (its leading whitespace dropped), and a reasoning that never closes is all reasoning. Tag text is never
    released early: a possible partial tag is held back until the next piece settles it.
    """

    def __init__(self, opened_in_prompt: bool) -> None:
        self._phase = _Phase.REASONING if opened_in_prompt else _Phase.START
        self._held = ""
        self._reasoning: list[str] = []

    @property
    def in_reasoning(self) -> bool:
        """Inside <think>…</think>: what is sampled now is not the answer (a grammar waits for the answer;
        before the output has opened a reasoning it is the answer's, so under a grammar none opens)."""
        return self._phase is _Phase.REASONING

    def feed(self, text: str) -> str:
        self._held += text
        answer = []
        while self._held:
            phase = self._phase
            if phase is _Phase.START:
                stripped = self._held.lstrip()
                if stripped.startswith(OPEN_TAG):
                    self._phase, self._held = _Phase.REASONING, stripped[len(OPEN_TAG):]
                elif OPEN_TAG.startswith(stripped):
                    break  # too short to tell
                else:
                    self._phase = _Phase.ANSWER
            elif phase is _Phase.REASONING:
                at = self._held.find(CLOSE_TAG)
                if at < 0:
                    keep = _partial_tag(self._held, CLOSE_TAG)
                    self._reasoning.append(self._held[:len(self._held) - keep])
                    self._held = self._held[len(self._held) - keep:]
                    break
                self._reasoning.append(self._held[:at])
                self._phase, self._held = _Phase.ANSWER_START, self._held[at + len(CLOSE_TAG):]
            elif phase is _Phase.ANSWER_START:
                self._held = self._held.lstrip()
                if self._held:
                    self._phase = _Phase.ANSWER
            else:
                answer.append(self._held)
                self._held = ""
        return "".join(answer)

    def flush(self) -> str:
        """At the end: what is still held goes where it was heading (an unfinished tag stays reasoning)."""
        held, self._held = self._held, ""
        if self._phase is _Phase.REASONING:
            self._reasoning.append(held)
            return ""
        return "" if self._phase is _Phase.ANSWER_START else held

    def take_reasoning(self) -> str:
        out = "".join(self._reasoning)
        self._reasoning.clear()
        return out
