"""One choice's answer text as the client gets it: content, and the tool calls read out of it. Both routes feed it the
text as it arrives and send what it releases, so a streamed answer adds up to the whole one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from worker.api.tools.parse import Context, Syntax, scan


@dataclass(frozen=True)
class Call:
    index: int  # its place among the choice's calls
    id: str
    name: str
    arguments: str  # a JSON object, as text

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def deltas(self) -> list[list[dict[str, Any]]]:
        """OpenAI's streamed form: each item is one chunk's delta.tool_calls, first the index, id, type and name
        (arguments ""), then the arguments."""
        return [[{"index": self.index, "id": self.id, "type": "function",
                  "function": {"name": self.name, "arguments": ""}}],
                [{"index": self.index, "function": {"arguments": self.arguments}}]]


@dataclass(frozen=True)
class Release:
    text: str = ""
    calls: tuple[Call, ...] = ()

    def __add__(self, other: Release) -> Release:
        return Release(self.text + other.text, self.calls + other.calls)


class Answer(Protocol):
    called: bool  # some call was released: the choice finishes with "tool_calls"

    def feed(self, text: str) -> Release: ...

    def finish(self) -> Release: ...


Answers = Callable[[], Answer]  # a fresh Answer per choice


class PlainText:
    """No tools: the text as it comes."""

    called = False

    def feed(self, text: str) -> Release:
        return Release(text)

    def finish(self) -> Release:
        return Release()


class CallStream:
    """Tools on offer: text until a call may be opening, calls once the model has written them whole (parse.py)."""

    def __init__(self, syntax: Syntax) -> None:
        self._syntax = syntax
        self._rest = ""  # text not settled yet
        self._context = Context()
        self._calls = 0
        self.called = False

    def feed(self, text: str) -> Release:
        self._rest += text
        return self._settle(final=False)

    def finish(self) -> Release:
        return self._settle(final=True)

    def _settle(self, final: bool) -> Release:
        found = scan(self._syntax, self._rest, final=final, context=self._context)
        self._rest, self._context = self._rest[found.end:], found.context
        calls = tuple(Call(self._calls + i, "call_" + uuid.uuid4().hex[:24], c.name, c.arguments)
                      for i, c in enumerate(found.calls))
        self._calls += len(calls)
        self.called = self.called or bool(calls)
        return Release(found.content, calls)
