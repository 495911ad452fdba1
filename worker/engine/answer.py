"""What the routes read a choice's answer into, as the model's text arrives: the answer's pieces (content, reasoning,
tool calls) and the readers' common shape. Plain data, free of llama_cpp: the routes import it at startup. A chat's
reader is serving/chat_answer.py's, llama.cpp's parser behind it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ToolCall:
    index: int  # its place among the choice's calls
    id: str
    name: str
    arguments: str  # a JSON object, as text


@dataclass(frozen=True)
class Release:
    """What one more piece of the model's text adds to the answer."""

    text: str = ""  # content
    reasoning: str = ""
    calls: tuple[ToolCall, ...] = ()

    def __add__(self, other: Release) -> Release:
        return Release(self.text + other.text, self.reasoning + other.reasoning, self.calls + other.calls)


class PlainText:
    """No chat format to read (a completion, a raw prompt): the text as it comes."""

    called = False

    def __init__(self, streamed: bool = False) -> None:
        """`streamed`: as a chat's reader is told; plain text reads the same either way."""

    def feed(self, text: str) -> Release:
        return Release(text)

    def finish(self, cut: bool = False) -> Release:
        return Release()


class Answer(Protocol):
    called: bool  # some call was released: the choice finishes with "tool_calls"

    def feed(self, text: str) -> Release: ...

    def finish(self, cut: bool = False) -> Release: ...  # cut: the answer was cut short (max_tokens, the context)


Answers = Callable[[bool], Answer]  # a fresh answer per choice, given whether it streams
