"""One choice's answer as the client gets it: reasoning, content and tool calls, read from the model's text by
llama.cpp's parser for its chat's format (native/chat_layer.py), as llama-server reads it. Every route feeds it the text
as it arrives and sends what it releases, so a streamed answer adds up to the whole one."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable

import structlog

from worker.engine.answer import Release, ToolCall
from worker.engine.errors import ChatTemplateError
from worker.engine.native.chat_layer import AnswerParser, ChatParams

log = structlog.get_logger(__name__)

# llama.cpp's parsers read the whole answer again on every call, as llama-server's do: a read costs ~25 µs plus about
# 0.05 µs a character so far (bench/probes/answerreader.py). Past READ_SPAN characters the reader reads every n-th
# piece, n = 1 + characters // READ_SPAN, which holds its cost under 70 µs a piece at any length; the pieces held go
# out with the next read, the same text in sum in fewer, larger deltas, and never held longer than HOLD_AT_MOST.
READ_SPAN = 2000
HOLD_AT_MOST = 0.1  # seconds: a slow stream (a big model, a busy host) reads every piece


class ChatAnswer:
    """The model's text in, the answer out, as it streams.

    Reasoning and content are released as the parser settles them (text that may still open a call or close the
    reasoning is held); tool calls are released whole, once the answer has ended and reads as its format. An answer
    that does not (a call with bad JSON, or naming no offered tool, or text where the format allows none) is read
    again as a chat without tools: its calls stay text, never an error (`without_tools` renders that chat's
    parser); llama-server would fail the request instead. An answer cut short is read as far as it goes."""

    def __init__(self, params: ChatParams, reasoning_format: str, continuation: bool,
                 without_tools: Callable[[], ChatParams] | None = None, streamed: bool = False) -> None:
        self._parser = AnswerParser(params, reasoning_format, continuation, streamed)
        self._reasoning_format, self._continuation, self._streamed = reasoning_format, continuation, streamed
        self._without_tools = without_tools
        self._text: list[str] = []  # the model's text so far
        self._length = 0  # its characters
        self._unread: list[str] = []  # its pieces not yet given to the parser
        self._read_at = time.monotonic()  # when the parser last read
        self._sent = Release()  # what was released
        self.called = False  # some call was released: the choice finishes with "tool_calls"

    def feed(self, text: str) -> Release:
        self._text.append(text)
        self._length += len(text)
        self._unread.append(text)
        now = time.monotonic()
        if len(self._unread) <= self._length // READ_SPAN and now - self._read_at < HOLD_AT_MOST:
            return Release()
        unread = "".join(self._unread)
        self._unread.clear()
        self._read_at = now
        try:
            deltas, _ = self._parser.feed(unread, final=False)
        except ChatTemplateError:  # a partial answer the parser cannot diff yet: the end reads it whole
            return Release()
        return self._released(Release("".join(d.content for d in deltas), "".join(d.reasoning for d in deltas)))

    def finish(self, cut: bool = False) -> Release:
        """The rest of the answer, its calls with it. `cut`: the answer was cut short (max_tokens, the context): it
        is read as the partial answer it is, its calls written whole released and one cut short left out."""
        try:
            deltas, message = self._parser.feed("".join(self._unread), final=not cut, with_message=True)
        except ChatTemplateError as unread:
            return self._read_without_tools(str(unread))
        finally:
            self._parser.close()
        assert message is not None  # asked for
        whole = list(itertools.takewhile(lambda call: _json_object(call[1]), message.calls))
        if len(whole) < len(message.calls) and not cut:  # a call whose arguments are no JSON object
            return self._read_without_tools("a call's arguments are not a whole JSON object")
        return self._released(Release("".join(d.content for d in deltas), "".join(d.reasoning for d in deltas),
                                      self._calls(whole)))

    def _calls(self, found: list[tuple[str, str]]) -> tuple[ToolCall, ...]:
        calls = tuple(ToolCall(i, "call_" + uuid.uuid4().hex[:24], name, arguments or "{}")
                      for i, (name, arguments) in enumerate(found))
        self.called = bool(calls)
        return calls

    def _read_without_tools(self, why: str) -> Release:
        """The whole answer as a chat without tools reads it, less what was released; the calls stay text."""
        text = "".join(self._text)
        log.warning("answer_unread", why=why[:200], text=text[:200])
        read = Release(text)  # not even as text: the text as the model wrote it
        if self._without_tools is not None:
            parser = AnswerParser(self._without_tools(), self._reasoning_format, self._continuation, self._streamed)
            try:  # deltas from what a continued message held already: the answer's own part, as released
                deltas, _ = parser.feed(text, final=True)
                read = Release("".join(d.content for d in deltas), "".join(d.reasoning for d in deltas))
            except ChatTemplateError:
                pass
            finally:
                parser.close()
        return self._released(Release(_after(read.text, self._sent.text),
                                      _after(read.reasoning, self._sent.reasoning)))

    def _released(self, release: Release) -> Release:
        self._sent += release
        return release


def _json_object(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments or "{}"), dict)
    except ValueError:
        return False


def _after(whole: str, sent: str) -> str:
    """What `whole` adds to what was sent already (nothing, if what was sent is not its start)."""
    return whole[len(sent):] if whole.startswith(sent) else ""
