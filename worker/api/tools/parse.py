"""Tool calls out of a model's answer, per call syntax; what is not a well-formed call stays text. Part of an answer
settles only what more text cannot change, so streamed and whole answers agree by construction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# Strict JSON: NaN and Infinity would make arguments no JSON parser reads.
_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
_SPACE = re.compile(r"\s*")


def _skipped(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where `pattern`, one that also matches nothing (whitespace, a separator that may be absent), ends at `pos`."""
    match = pattern.match(text, pos)
    assert match is not None, f"{pattern.pattern!r} must match the empty string too"
    return match.end()


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # one JSON object, as text


@dataclass(frozen=True)
class Read:
    """A region from an opener to `end`: its calls, or none when it is malformed (then it stays text)."""

    end: int
    calls: tuple[ToolCall, ...] = ()


# (text, where the call's own text starts, final) -> the region read, or None when it is not complete yet.
ReadFn = Callable[[str, int, bool], "Read | None"]


@dataclass(frozen=True)
class Opener:
    pattern: re.Pattern[str]
    spellings: tuple[str, ...]  # what it matches, shortest forms without whitespace: a tail that begins one waits
    read: ReadFn
    starts_json: bool = False  # the opener is the start of the call's JSON (else the call follows it)
    first: bool = False  # only before any text: elsewhere a JSON answer that looks like a call is text

    def match(self, text: str, pos: int, blank: bool) -> re.Match[str] | None:
        if not self.first:
            return self.pattern.search(text, pos)
        return self.pattern.match(text, _skipped(_SPACE, text, pos)) if blank else None


# A syntax: a few openers (where a call may begin), each with a reader that takes the call from there.
@dataclass(frozen=True)
class Syntax:
    openers: tuple[Opener, ...]
    between: re.Pattern[str] = _SPACE  # what may separate consecutive calls (dropped with them)


@dataclass(frozen=True)
class Context:
    """What the settled part of an answer leaves for scanning the rest."""

    blank: bool = True  # no content yet, only calls and whitespace
    after_call: bool = False  # the last thing settled was a call: the whitespace next is dropped
    gap: str = ""  # the whitespace between content and a call: written only if more content follows


@dataclass(frozen=True)
class Scan:
    content: str  # text settled as the answer's content
    calls: list[ToolCall]
    end: int  # text[:end] is settled; the rest waits for more text
    context: Context


def scan(syntax: Syntax, text: str, *, final: bool, context: Context = Context()) -> Scan:
    """Settle `text`, an answer or the rest of one (`context`: what came before it).

    The text is walked from opener to opener: a region that reads as calls becomes calls, one that does not stays
    text. A call's surrounding whitespace goes with it, except that content on both sides stays apart as written.
    With `final=False` the scan stops before a call not complete yet, before a tail that may still grow into an
    opener, and before trailing whitespace (a call may follow it): the pieces settled as tokens arrive add up to
    exactly what one scan of the whole answer finds.
    """
    blank, after_call, gap = context.blank, context.after_call, context.gap
    content: list[str] = []
    calls: list[ToolCall] = []
    pos = _skipped(syntax.between, text, 0) if after_call else 0

    def settle(piece: str) -> None:
        nonlocal blank, after_call, gap
        if piece:
            content.extend((gap, piece))
            blank, after_call, gap = blank and not piece.strip(), False, ""

    while True:
        hit = _next_opener(syntax, text, pos, blank)
        if hit is None:
            end = len(text) if final else _settled_end(syntax, text, pos, blank)
            settle(text[pos:end])
            pos = end
            break
        opener, match = hit
        before = text[pos:match.start()]
        region = opener.read(text, match.start() if opener.starts_json else match.end(), final)
        if region is None:  # a call may be under way: hold it back, and the whitespace before it
            settle(before.rstrip())
            pos += len(before.rstrip())
            break
        if not region.calls:
            settle(text[pos:region.end])
            pos = region.end
            continue
        settle(before.rstrip())
        if not blank:
            gap = gap or before[len(before.rstrip()):]
        calls.extend(region.calls)
        after_call = True
        pos = _skipped(syntax.between, text, region.end)
    return Scan("".join(content), calls, pos, Context(blank, after_call, gap))


def _next_opener(syntax: Syntax, text: str, pos: int, blank: bool) -> tuple[Opener, re.Match[str]] | None:
    hits = [(match.start(), i, opener, match) for i, opener in enumerate(syntax.openers)
            if (match := opener.match(text, pos, blank)) is not None]
    return min(hits)[2:] if hits else None


def _settled_end(syntax: Syntax, text: str, pos: int, blank: bool) -> int:
    """Where settled text ends when no opener is in sight: before trailing whitespace, and before a tail
    that is still the start of an opener (it may become one with the next piece)."""
    end = pos + len(text[pos:].rstrip())
    for at in range(pos, end):
        spellings = [s for opener in syntax.openers if not opener.first or (blank and not text[pos:at].strip())
                     for s in opener.spellings if s[0] == text[at]]
        if spellings:
            squeezed = _squeezed(text[at:end], max(map(len, spellings)))
            if any(len(squeezed) < len(s) and s.startswith(squeezed) for s in spellings):
                return pos + len(text[pos:at].rstrip())
    return end


def _squeezed(text: str, limit: int) -> str:
    """`text` without whitespace, cut after `limit` + 1 characters (enough to tell it is longer)."""
    out: list[str] = []
    for char in text:
        if not char.isspace():
            out.append(char)
            if len(out) > limit:
                break
    return "".join(out)


def _json_at(text: str, at: int) -> tuple[Any, int] | None:
    """The JSON object or array starting at `at` (after whitespace) and where it ends; None if there is none
    there (yet: a value cut short and a malformed one look the same until the answer ends)."""
    at = _skipped(_SPACE, text, at)
    if not text.startswith(("{", "["), at):
        return None
    try:
        return _JSON.raw_decode(text, at)
    except ValueError:
        return None


def _call_of(value: Any, argument_keys: tuple[str, ...] = ("arguments",)) -> ToolCall | None:
    """A {"name": ..., "arguments": {...}} object as a call; the arguments may come as a JSON string of one."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    key = next((k for k in argument_keys if k in value), None)
    arguments = value.get(key) if key else None
    if isinstance(arguments, str):
        try:
            arguments = _JSON.decode(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def _unfinished(text: str, final: bool) -> Read | None:
    """A call that cannot be read yet: wait for more text, or, at the end, leave the rest as text."""
    return Read(len(text)) if final else None


# Hermes 2 Pro, Qwen 2.5/3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block per call.
HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"


def _read_hermes(text: str, at: int, final: bool) -> Read | None:
    close = text.find(HERMES_CLOSE, at)
    end = len(text) if close < 0 else close
    if close < 0 and not final:
        return None
    decoded = _json_at(text, at)
    call = _call_of(decoded[0]) if decoded and not text[decoded[1]:end].strip() else None
    # An answer that ends right after the call's JSON, its closing tag never written, still made the call.
    return Read(end if close < 0 else close + len(HERMES_CLOSE), (call,) if call else ())


def _json_reader(calls: Callable[[Any], list[ToolCall | None] | None]) -> ReadFn:
    """A reader for calls written as one JSON value; `calls` takes them out of it (None: not calls)."""

    def read(text: str, at: int, final: bool) -> Read | None:
        decoded = _json_at(text, at)
        if decoded is None:
            return _unfinished(text, final)
        found = calls(decoded[0]) or []
        read = tuple(call for call in found if call is not None)
        return Read(decoded[1], read if found and len(read) == len(found) else ())

    return read


def _call_list(value: Any) -> list[ToolCall | None] | None:
    return [_call_of(item) for item in value] if isinstance(value, list) else None


def _generic_calls(value: Any) -> list[ToolCall | None] | None:
    """{"tool_calls": [call, ...]} or {"tool_call": call} (llama.cpp's generic form), nothing else beside."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    if "tool_calls" in value:
        return _call_list(value["tool_calls"])
    return [_call_of(value["tool_call"])] if "tool_call" in value else None


_LLAMA_KEYS = ("parameters", "arguments")  # Llama 3.x is trained on "parameters"; some write "arguments"


def _llama_call(value: Any) -> list[ToolCall | None] | None:
    extra = set(value) - {"type", "name", *_LLAMA_KEYS} if isinstance(value, dict) else {"?"}
    return None if extra or value.get("type", "function") != "function" else [_call_of(value, _LLAMA_KEYS)]


_read_llama_json = _json_reader(_llama_call)
_BUILTIN = re.compile(r"\s*([A-Za-z_]\w*)\.call\(")
_KEYWORD = re.compile(r"\s*([A-Za-z_]\w*)\s*=")
_CLOSE_CALL = re.compile(r"\s*\)")
_COMMA = re.compile(r"\s*,")


def _read_python_tag(text: str, at: int, final: bool) -> Read | None:
    """After <|python_tag|>: a JSON call, or a built-in tool's `name.call(key=value, ...)` (values in JSON)."""
    if text.startswith("{", _skipped(_SPACE, text, at)):
        return _read_llama_json(text, at, final)
    head = _BUILTIN.match(text, at)
    if head is None:
        return _unfinished(text, final)
    arguments: dict[str, Any] = {}
    pos = head.end()
    while True:
        if closing := _CLOSE_CALL.match(text, pos):
            return Read(closing.end(), (ToolCall(head[1], json.dumps(arguments, ensure_ascii=False)),))
        if arguments:
            comma = _COMMA.match(text, pos)
            if comma is None:
                break
            pos = comma.end()
        keyword = _KEYWORD.match(text, pos)
        value = _value_at(text, keyword.end()) if keyword else None
        if keyword is None or value is None:
            break
        arguments[keyword[1]], pos = value
    return _unfinished(text, final)


def _value_at(text: str, at: int) -> tuple[Any, int] | None:
    """Any JSON value at `at`; a number is complete only once something follows it."""
    at = _skipped(_SPACE, text, at)
    try:
        value, end = _JSON.raw_decode(text, at)
    except ValueError:
        return None
    return (value, end) if end < len(text) else None


_TAG_SPACE = re.compile(r"\s*;?\s*")  # Llama writes several JSON calls apart, at most with a ';'

HERMES = Syntax((Opener(re.compile(re.escape(HERMES_OPEN)), (HERMES_OPEN,), _read_hermes),))
LLAMA_3 = Syntax((
    Opener(re.compile(re.escape("<|python_tag|>")), ("<|python_tag|>",), _read_python_tag),
    # A bare JSON call opens the answer: only there (a JSON answer further on is an answer).
    Opener(re.compile(r'\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?"name"\s*:'),
           ('{"name":', '{"type":"function","name":'), _read_llama_json, starts_json=True, first=True),
), between=_TAG_SPACE)
MISTRAL = Syntax((
    Opener(re.compile(re.escape("[TOOL_CALLS]")), ("[TOOL_CALLS]",), _json_reader(_call_list)),
    # [TOOL_CALLS] is a control token, which the engine does not write out: its JSON list opens the answer.
    Opener(re.compile(r'\[\s*\{\s*"name"\s*:'), ('[{"name":',), _json_reader(_call_list), starts_json=True,
           first=True),
))
GENERIC = Syntax((
    Opener(re.compile(r'\{\s*"tool_calls?"\s*:'), ('{"tool_calls":', '{"tool_call":'), _json_reader(_generic_calls),
           starts_json=True),
))
