"""One choice's events into a route's content, as they come: Anthropic's blocks, the Responses API's items. Both build
from the same pieces in the same order and stream each addition through `send`; a whole answer sends nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from worker.api.generation import TrackedHandle
from worker.engine import Answer, Finished, FinishReason, TokenEvent
from worker.engine import ToolCall as Call

Event = dict[str, Any]
Send = Callable[[list[Event]], Awaitable[None]]
# Endings with an answer to finish; the others are failures, which each route reports in its own shape.
ENDED = (FinishReason.EOS, FinishReason.STOP, FinishReason.LENGTH)


class Content(Protocol):
    def add(self, kind: str, text: str) -> list[Event]: ...  # kind: the builder's reasoning kind, or "text"

    def call(self, call: Call) -> list[Event]: ...

    def finish(self, finished: Finished) -> list[Event]: ...  # the answer ended: close what is open


async def feed(handle: TrackedHandle, answer: Answer, content: Content, send: Send, reasoning: str) -> int:
    """`reasoning`: the content's kind for a thinking model's reasoning. Returns the tokens generated up to the
    last reasoning text (the reasoning's tokens, its tags with it)."""
    reasoning_tokens = 0
    async for event in handle:
        if isinstance(event, TokenEvent):
            release = answer.feed(event.text)
            if release.reasoning:
                reasoning_tokens = event.tokens
            await send(content.add(reasoning, release.reasoning) + content.add("text", release.text))
            for call in release.calls:
                await send(content.call(call))
    finished = handle.ended
    if finished.reason in ENDED:
        release = answer.finish(cut=finished.reason is FinishReason.LENGTH)
        await send(content.add(reasoning, release.reasoning) + content.add("text", release.text))
        for call in release.calls:
            await send(content.call(call))
        await send(content.finish(finished))
    return reasoning_tokens


async def unsent(events: list[Event]) -> None:
    """A whole answer sends nothing as it goes."""
