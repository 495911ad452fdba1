"""Tool calls read out of answers written in each format, whole and as streamed pieces; no model needed."""

from __future__ import annotations

import json

import pytest

from worker.api.tools.answer import CallStream
from worker.api.tools.formats import GENERIC_FORMAT, HERMES_FORMAT, LLAMA_3_FORMAT, MISTRAL_FORMAT, detect
from worker.api.tools.grammar import call_grammar
from worker.api.tools.parse import GENERIC, HERMES, LLAMA_3, MISTRAL, Syntax
from worker.api.tools.request import Function, Tools

Parsed = tuple[str, list[tuple[str, dict]]]


def whole(syntax: Syntax, text: str) -> Parsed:
    """(content, [(name, arguments)]) for an answer read at once, as a non-streamed response reads it."""
    answer = CallStream(syntax)
    release = answer.feed(text) + answer.finish()
    return release.text, [(call.name, json.loads(call.arguments)) for call in release.calls]


def streamed(syntax: Syntax, text: str, step: int) -> Parsed:
    answer = CallStream(syntax)
    releases = [answer.feed(text[i:i + step]) for i in range(0, len(text), step)] + [answer.finish()]
    calls = [call for release in releases for call in release.calls]
    assert [call.index for call in calls] == list(range(len(calls)))
    return "".join(r.text for r in releases), [(call.name, json.loads(call.arguments)) for call in calls]


WEATHER = ("get_weather", {"city": "Paris"})
TIME = ("get_time", {"zone": "CET", "exact": True})
CASES = {
    # Hermes 2 Pro / Qwen: <tool_call> blocks
    "hermes_one": (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                   ("", [WEATHER])),
    "hermes_two": (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                           '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET", "exact": true}}\n'
                           '</tool_call>',
                   ("", [WEATHER, TIME])),
    "hermes_after_text": (HERMES, 'Let me look that up.\n<tool_call>{"name": "get_weather", "arguments": '
                                  '{"city": "Paris"}}</tool_call>', ("Let me look that up.", [WEATHER])),
    "hermes_text_around": (HERMES, 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
                                   '</tool_call>\nDone.', ("Checking. Done.", [WEATHER])),
    "hermes_unclosed_at_end": (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n',
                               ("", [WEATHER])),
    "hermes_malformed": (HERMES, 'A <tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call> B',
                         ('A <tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call> B', [])),
    "hermes_malformed_then_good": (
        HERMES, '<tool_call>{"name": "x"}</tool_call> <tool_call>{"name": "get_weather", "arguments": '
                '{"city": "Paris"}}</tool_call>', ('<tool_call>{"name": "x"}</tool_call>', [WEATHER])),
    "hermes_cut_short": (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"ci',
                         ('<tool_call>\n{"name": "get_weather", "arguments": {"ci', [])),
    "hermes_lookalike": (HERMES, "if a <tool_ b", ("if a <tool_ b", [])),
    # Llama 3.x: a bare JSON call opening the answer, or <|python_tag|>
    "llama_one": (LLAMA_3, '{"name": "get_weather", "parameters": {"city": "Paris"}}', ("", [WEATHER])),
    "llama_two": (LLAMA_3, '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}; '
                           '{"name": "get_time", "parameters": {"zone": "CET", "exact": true}}', ("", [WEATHER, TIME])),
    "llama_json_after_text": (LLAMA_3, 'As JSON: {"name": "get_weather", "parameters": {"city": "Paris"}}',
                              ('As JSON: {"name": "get_weather", "parameters": {"city": "Paris"}}', [])),
    "llama_python_tag_after_text": (LLAMA_3, 'Looking.<|python_tag|>{"name": "get_weather", "parameters": '
                                             '{"city": "Paris"}}', ("Looking.", [WEATHER])),
    "llama_builtin": (LLAMA_3, '<|python_tag|>brave_search.call(query="weather in Paris", count=3)',
                      ("", [("brave_search", {"query": "weather in Paris", "count": 3})])),
    "llama_malformed": (LLAMA_3, '{"name": "get_weather", "parameters": {"city": "Paris"}, "extra": 1}',
                        ('{"name": "get_weather", "parameters": {"city": "Paris"}, "extra": 1}', [])),
    "llama_builtin_malformed": (LLAMA_3, '<|python_tag|>brave_search.call(query=weather)',
                                ('<|python_tag|>brave_search.call(query=weather)', [])),
    # Mistral Nemo: [TOOL_CALLS][...], or the bare list when the control token is not written out
    "mistral_two": (MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}, '
                             '{"name": "get_time", "arguments": "{\\"zone\\": \\"CET\\", \\"exact\\": true}"}]',
                    ("", [WEATHER, TIME])),
    "mistral_after_text": (MISTRAL, 'Sure.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]',
                           ("Sure.", [WEATHER])),
    "mistral_bare": (MISTRAL, '[{"name": "get_weather", "arguments": {"city": "Paris"}}]', ("", [WEATHER])),
    "mistral_malformed": (MISTRAL, '[TOOL_CALLS][{"name": "get_weather"}]',
                          ('[TOOL_CALLS][{"name": "get_weather"}]', [])),
    # generic JSON: {"tool_calls": [...]} or {"tool_call": {...}}
    "generic_two": (GENERIC, '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                             '{"name": "get_time", "arguments": {"zone": "CET", "exact": true}}]}',
                    ("", [WEATHER, TIME])),
    "generic_single_after_text": (GENERIC, 'One moment.\n\n{"tool_call": {"name": "get_weather", "arguments": '
                                           '{"city": "Paris"}}}', ("One moment.", [WEATHER])),
    "generic_malformed": (GENERIC, '{"tool_calls": [{"name": "get_weather", "arguments": {"t": NaN}}]}',
                          ('{"tool_calls": [{"name": "get_weather", "arguments": {"t": NaN}}]}', [])),
    "generic_other_json": (GENERIC, 'Here: {"tool": "hammer"} and {"tool_calls": 3}.',
                           ('Here: {"tool": "hammer"} and {"tool_calls": 3}.', [])),
    "generic_plain": (GENERIC, "\n  Just an answer.\n", ("\n  Just an answer.\n", [])),
}


@pytest.mark.parametrize("case", CASES)
def test_calls_read_whole_and_streamed_alike(case):
    syntax, text, expected = CASES[case]
    assert whole(syntax, text) == expected
    for step in (1, 2, 5):
        assert streamed(syntax, text, step) == expected, step


def test_text_is_held_back_only_while_a_call_may_be_opening():
    answer = CallStream(HERMES)
    assert answer.feed("Sure, ").text == "Sure,"  # the space may sit before a call: held
    assert answer.feed("<tool").text == ""
    assert answer.feed("box> is a tag").text == " <toolbox> is a tag"
    assert answer.feed(" <tool_call>").text == ""
    release = answer.feed('{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
    assert release.text == "" and [c.name for c in release.calls] == ["get_weather"] and answer.called


def test_calls_stream_as_openai_deltas():
    answer = CallStream(GENERIC)
    calls = answer.feed('{"tool_calls": [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]}').calls
    assert [c.index for c in calls] == [0, 1] and len({c.id for c in calls}) == 2
    assert all(c.id.startswith("call_") for c in calls)
    opening, arguments = calls[1].deltas()
    assert opening == [{"index": 1, "id": calls[1].id, "type": "function", "function": {"name": "b", "arguments": ""}}]
    assert arguments == [{"index": 1, "function": {"arguments": '{"x": 1}'}}]
    assert calls[1].as_json() == {"id": calls[1].id, "type": "function",
                                  "function": {"name": "b", "arguments": '{"x": 1}'}}


@pytest.mark.parametrize("template, expected", [
    ("{% for m in messages %}<|im_start|>{{ m.role }}...{% if m.tool_calls %}<tool_call>{% endif %}", HERMES_FORMAT),
    ('{{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}{{ "<|python_tag|>" }}', LLAMA_3_FORMAT),
    ("[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS]...[TOOL_CALLS]", MISTRAL_FORMAT),
    ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}", GENERIC_FORMAT),
    (None, GENERIC_FORMAT),
])
def test_format_detected_from_the_template(template, expected):
    assert detect(template) is expected


def test_forced_call_grammar_wraps_the_converted_schema():
    address = {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}
    ship = Function("ship", None, {"type": "object", "properties": {"to": {"$ref": "#/$defs/Address"}},
                                   "required": ["to"], "$defs": {"Address": address}})
    ping = Function("ping", None, {"type": "object", "properties": {}})
    hermes = call_grammar(HERMES_FORMAT, Tools((ship, ping), forced=True, only=None, parallel=True))
    assert 'root ::= tool-call ( "\\n" tool-call )*' in hermes
    assert 'tool-call ::= "<tool_call>\\n" ( alternative-0 | alternative-1 ) "\\n</tool_call>"' in hermes
    assert '"\\"ship\\""' in hermes and "Address ::=" in hermes  # the reference resolved where it was moved
    named = call_grammar(GENERIC_FORMAT, Tools((ship, ping), forced=True, only="ping", parallel=False))
    assert '"\\"ping\\""' in named and '"\\"ship\\""' not in named and "tool-call ::=" not in named
    llama = call_grammar(LLAMA_3_FORMAT, Tools((ping,), forced=True, only=None, parallel=True))
    assert '"\\"parameters\\""' in llama and "</think>" not in llama  # the engine holds a grammar back while thinking


def test_lazy_call_grammar_starts_at_the_trigger():
    """tool_choice auto: the grammar's root starts with the text that wakes it, the layout's whitespace loose."""
    ping = Function("ping", None, {"type": "object", "properties": {}})
    tools = Tools((ping,), forced=False, only=None, parallel=True)
    hermes = call_grammar(HERMES_FORMAT, tools, lazy=True)
    assert "root ::= tool-call ( layout-space tool-call )*" in hermes
    assert 'tool-call ::= "<tool_call>" layout-space ( "{" space name-kv' in hermes
    assert '"}" space ) layout-space "</tool_call>"' in hermes
    mistral = call_grammar(MISTRAL_FORMAT, tools, lazy=True)  # [TOOL_CALLS] is a control token: no text wakes on it
    assert "[TOOL_CALLS]" not in mistral and 'root ::= "[" space' in mistral
    for fmt in (GENERIC_FORMAT, LLAMA_3_FORMAT):  # their calls are bare JSON, which the trigger opens
        assert call_grammar(fmt, tools, lazy=True) == call_grammar(fmt, tools)
        assert 'root ::= "{" space' in call_grammar(fmt, tools)
