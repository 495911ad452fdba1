"""Where a thinking model's output is: its reasoning, between its chat template's start tag and an end tag (<think>…
</think>, gpt-oss's analysis channel up to <|end|>, ...), or its answer. The text itself passes through whole (a chat's
answer is split into reasoning and content by llama.cpp's parser, api/chat_reply.py); the phase decides what the
engine's own rules see: stop strings and a grammar of the answer look only at the answer, a reasoning budget counts
only the reasoning."""

from __future__ import annotations

import enum

from worker.engine.requests import Reasoning


class _Phase(enum.Enum):
    START = "start"  # the output may still open with the start tag
    REASONING = "reasoning"
    ANSWER = "answer"


class ReasoningPhase:
    """Decoded text in; each piece back cut where the reasoning ends: (reasoning, answer), in that order.

    The reasoning opens in the prompt (the template ends its opening of the answer with the start tag, e.g. Qwen3's
    <think>) or at the very start of the output (after whitespace); up to and including the first end tag it is
    reasoning, the rest is the answer, and a reasoning that never closes is all reasoning. At the start, text that may
    still be the start tag is held until the next piece settles it; once reasoning, nothing is held: an end tag cut
    across pieces is found in the reasoning already passed on."""

    def __init__(self, reasoning: Reasoning) -> None:
        self._start = reasoning.start_tag
        self._ends = tuple(tag for tag in reasoning.end_tags if tag)
        self._phase = _Phase.REASONING if reasoning.opened_in_prompt else _Phase.START
        self._held = ""  # at the start: text that may still open the reasoning
        # Once reasoning: its last characters, where an end tag's beginning may already have passed.
        self._tail = ""
        self._reach = max((len(tag) for tag in self._ends), default=1) - 1

    @property
    def in_reasoning(self) -> bool:
        """Inside the reasoning: what is sampled now is not the answer (a grammar of the answer waits for it; before
        the output has opened a reasoning it is the answer's, so under such a grammar none opens)."""
        return self._phase is _Phase.REASONING

    @property
    def answering(self) -> bool:
        """The answer has begun: the phase changes no more."""
        return self._phase is _Phase.ANSWER

    def feed(self, text: str) -> tuple[str, str]:
        if self._phase is _Phase.START:
            self._held += text
            stripped = self._held.lstrip()
            if self._start and stripped.startswith(self._start):
                self._phase, text, self._held = _Phase.REASONING, self._held, ""
            elif self._start and self._start.startswith(stripped):
                return "", ""  # too short to tell
            else:
                self._phase, held, self._held = _Phase.ANSWER, self._held, ""
                return "", held
        if self._phase is _Phase.ANSWER:
            return "", text
        return self._reasoning(text)

    def _reasoning(self, text: str) -> tuple[str, str]:
        window = self._tail + text
        ends = [(at + len(tag), at) for tag in self._ends if (at := window.find(tag)) >= 0]
        if not ends:
            self._tail = window[max(0, len(window) - self._reach):] if self._reach else ""
            return text, ""
        cut = min(ends)[0] - len(self._tail)  # where the first end tag ends, in `text`
        self._phase, self._tail = _Phase.ANSWER, ""
        return text[:cut], text[cut:]

    def flush(self) -> tuple[str, str]:
        """At the end: what is still held is the answer's (it never became the start tag)."""
        held, self._held = self._held, ""
        return "", held
