"""The GBNF grammar of a tool call, per format: of a forced one (tool_choice required, or a named function), and the
lazy one of tool_choice auto, which constrains a call once the answer opens one (docs/api.md, "Tool calling").
"""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

from worker.api.tools.formats import ToolFormat
from worker.api.tools.request import Tools
from worker.engine import schema_grammar

_ROOT = re.compile(r"^root ::= (.*)$", re.MULTILINE)
_ENVELOPE = "tool-call"
_SPACE = "layout-space"
# llama.cpp's JSON `space`, which its lazy grammars put around a call's tags: a model's own layout, bounded.
_SPACE_RULE = '( " " | "\\n"{1,2} [ \\t]{0,20} )?'


def call_grammar(fmt: ToolFormat, tools: Tools, lazy: bool = False) -> str:
    """The answer: one call (or several, when parallel) of the offered functions, in the format's syntax.

    Each function's call is a JSON schema, {"name": <its name>, <arguments key>: <its parameters>}, the format's body
    holds them, the engine's converter (worker.engine.constraints.json_schema) makes that GBNF, and the format's text
    (Hermes' <tool_call> tags, Mistral's [TOOL_CALLS]) is wrapped around its root rule: a forced call's arguments
    validate against the function's schema by construction. Each function's parameters sit under $defs, referenced,
    as the converter resolves references along object keys only, not through anyOf's list.

    `lazy` (tool_choice auto): the answer from the call's opening on, which the root starts with `fmt.trigger`:
    a prefix that is a control token is left out (no text shows it, so the grammar wakes after it), and the
    whitespace of the layout is the model's own. A thinking model's reasoning comes first, free: the engine
    holds the grammar back until </think>."""
    functions = tools.callable
    defs = {f"arguments-{i}": _rebased(f.parameters, f"#/$defs/arguments-{i}") for i, f in enumerate(functions)}
    calls = [{"type": "object", "properties": {"name": {"const": f.name},
                                               fmt.arguments_key: {"$ref": f"#/$defs/arguments-{i}"}},
              "required": ["name", fmt.arguments_key], "additionalProperties": False}
             for i, f in enumerate(functions)]
    grammar = schema_grammar({**fmt.body(calls, tools.parallel), "$defs": defs})
    root = _ROOT.search(grammar)
    assert root is not None  # the converter always writes a root rule
    body = root[1]
    prefix = "" if lazy and fmt.token_prefix else fmt.prefix
    if prefix or fmt.suffix:
        envelope = _fresh_name(grammar, _ENVELOPE)
        space = _fresh_name(grammar, _SPACE)
        layout = partial(_loose, space=space) if lazy else _literal
        separated = f" ( {layout(fmt.repeats)} {envelope} )*" if fmt.repeats and tools.parallel else ""
        grammar = _ROOT.sub(lambda _: f"root ::= {envelope}{separated}", grammar) + (
            f"\n{envelope} ::= {layout(prefix)} ( {body} ) {layout(fmt.suffix)}")
        if lazy:
            grammar += f"\n{space} ::= {_SPACE_RULE}"
    return grammar


def _literal(text: str) -> str:
    """A GBNF string literal (its escapes are JSON's, and it is given ASCII)."""
    return json.dumps(text) if text else '""'


def _loose(text: str, space: str) -> str:
    """`text` in GBNF with the whitespace at its edges as the rule `space`: "<tool_call>\\n" -> "<tool_call>" space."""
    core = text.strip()
    if not core:
        return space if text else '""'
    return " ".join([*([space] if text[0].isspace() else []), _literal(core),
                     *([space] if text[-1].isspace() else [])])


def _fresh_name(grammar: str, name: str) -> str:
    """A rule name the converter did not use (a $defs entry may be named anything)."""
    taken = set(re.findall(r"^([\w-]+) ::=", grammar, re.MULTILINE))
    return next(f"{name}{i or ''}" for i in range(len(taken) + 1) if f"{name}{i or ''}" not in taken)


def _rebased(schema: Any, base: str) -> Any:
    """`schema` with its local references (#/...) pointing into `base`, where it will sit."""
    if isinstance(schema, dict):
        return {key: base + value[1:] if key == "$ref" and isinstance(value, str) and value.startswith("#")
                else _rebased(value, base) for key, value in schema.items()}
    if isinstance(schema, list):
        return [_rebased(item, base) for item in schema]
    return schema
