"""Which tool-call format a chat template speaks, found by marker text in its source as llama.cpp's common/chat.cpp
finds it: how its calls are written (parse.py), a forced call's layout (grammar.py), the text that wakes auto's grammar
(docs/api.md, "Tool calling").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from worker.api.tools.parse import GENERIC, HERMES, HERMES_CLOSE, HERMES_OPEN, LLAMA_3, MISTRAL, Syntax

Schema = dict[str, Any]


def _either(calls: list[Schema]) -> Schema:
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def _listed(calls: list[Schema], parallel: bool) -> Schema:
    return {"type": "array", "items": _either(calls), "minItems": 1, **({} if parallel else {"maxItems": 1})}


@dataclass(frozen=True)
class ToolFormat:
    name: str
    marker: str | None  # text in a template's source that selects this format (None: the generic one, the fallback)
    syntax: Syntax
    arguments_key: str  # a call object is {"name": ..., <arguments_key>: {...}}
    # The JSON that forced calls are (each call's object given), and the text around it.
    body: Callable[[list[Schema], bool], Schema]
    prefix: str = ""
    suffix: str = ""
    repeats: str | None = None  # calls are written one body each, this apart (None: one body holds them)
    # tool_choice auto: the text that opens a call, where the lazy grammar wakes and its root starts.
    trigger: str = ""
    trigger_first: bool = False  # only opening the answer: further on, that text is an answer's, not a call
    token_prefix: bool = False  # the prefix is a control token, never in the text: a lazy grammar goes without


HERMES_FORMAT = ToolFormat("hermes", HERMES_OPEN, HERMES, "arguments", lambda calls, _: _either(calls),
                           prefix=HERMES_OPEN + "\n", suffix="\n" + HERMES_CLOSE, repeats="\n", trigger=HERMES_OPEN)
# Control tokens are not in the engine's text, so Llama 3's <|python_tag|> and Mistral's [TOOL_CALLS] never show: those
# formats wake on the JSON that opens the answer, where parse.py reads their bare calls.
# Llama 3.x writes one call per answer: its JSON form has no list.
LLAMA_3_FORMAT = ToolFormat("llama3", "<|start_header_id|>ipython<|end_header_id|>", LLAMA_3, "parameters",
                            lambda calls, _: _either(calls), trigger='{"name"', trigger_first=True)
MISTRAL_FORMAT = ToolFormat("mistral", "[TOOL_CALLS]", MISTRAL, "arguments", _listed, prefix="[TOOL_CALLS]",
                            trigger='[{"name"', trigger_first=True, token_prefix=True)
# Anywhere, as parse.py reads it; `{"tool_call` also wakes on the singular form, which the grammar then writes
# as the list.
GENERIC_FORMAT = ToolFormat("generic", None, GENERIC, "arguments", lambda calls, parallel: {
    "type": "object", "properties": {"tool_calls": _listed(calls, parallel)}, "required": ["tool_calls"]},
    trigger='{"tool_call')
# In llama.cpp's order, first match wins: Hermes 2 Pro and Qwen 2.5/3, Llama 3.1-3.3, Mistral Nemo; else generic.
FORMATS = (HERMES_FORMAT, LLAMA_3_FORMAT, MISTRAL_FORMAT)


def detect(template: str | None) -> ToolFormat:
    return next((f for f in FORMATS if f.marker is not None and f.marker in (template or "")), GENERIC_FORMAT)


def lists_tools(template: str | None) -> bool:
    """The template shows the model its tools (it reads the `tools` variable)."""
    return "tools" in (template or "")


def writes_calls(template: str | None) -> bool:
    """The template writes an assistant's tool calls from the history (it reads `tool_calls`)."""
    return "tool_calls" in (template or "")
