"""A Messages request's tools and tool_choice, read into the tool-calling engine's terms (worker/api/tools): custom
tools are functions, input_schema their parameters; Anthropic's own tools are refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from worker.api.problems import Reader
from worker.api.tools.request import NAME, Function, Tools, check_forced

KINDS = ("auto", "any", "tool", "none")


def read_tools(r: Reader) -> Tools | None:
    """The request's tools; None when there are none (with tool_choice none they are shown, their calls not read)."""
    raw = r.body.get("tools")
    if raw is not None and not isinstance(raw, list):
        r.problem("tools", "a list of tools", "tools must be a list of {name, description, input_schema}", raw)
    functions: list[Function] = []
    schema_fields: dict[str, str] = {}
    for i, tool in enumerate(raw if isinstance(raw, list) else []):
        function = _function(r, f"tools[{i}]", tool)
        if function is not None:
            functions.append(function)
            schema_fields[function.name] = f"tools[{i}].input_schema"
    kind, only, parallel = _choice(r, {f.name for f in functions})
    offered = isinstance(raw, list) and bool(raw)
    if kind in ("any", "tool") and not offered:
        r.problem("tool_choice.type", "tools to choose from", f"tool_choice {kind!r} needs tools", kind)
    if not offered:
        return None
    tools = Tools(tuple(functions), "required" if kind in ("any", "tool") else kind, only=only, parallel=parallel)
    check_forced(r, tools, schema_fields)
    return tools


def _function(r: Reader, field: str, tool: Any) -> Function | None:
    if not isinstance(tool, dict):
        r.problem(field, "{name, description, input_schema}", f"{field} must be an object", tool)
        return None
    kind = tool.get("type", "custom")
    # Anthropic's own tools (web search, bash, the text editor...) run on its side or are trained into its models.
    if kind != "custom":
        r.problem(f"{field}.type", "custom", f"{kind!r} tools are not supported: only custom tools ({{name, "
                  "description, input_schema}) are, as Anthropic's own tools run on its side", kind)
        return None
    nested = Reader(tool)
    name = nested.string("name", required=True)
    description = nested.string("description")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        nested.problem("input_schema", "a JSON schema of type object", "input_schema is required: a JSON schema "
                       "with \"type\": \"object\" (a tool's input is one JSON object)", schema)
    if isinstance(name, str) and not NAME.fullmatch(name):
        nested.problem("name", "^[a-zA-Z0-9_-]{1,64}$", "a tool name is 1 to 64 letters, digits, _ and -", name)
    r.problems += [replace(p, field=f"{field}.{p.field}") for p in nested.problems]
    if nested.problems or not isinstance(schema, dict):  # (a schema that is not an object is one of them)
        return None
    return Function(name, description, schema)


def _choice(r: Reader, names: set[str]) -> tuple[str, str | None, bool]:
    """tool_choice as (its type, the tool it names, whether several calls may come at once).

    `any` is OpenAI's `required`, `tool` names the one function to call, and disable_parallel_tool_use is
    parallel_tool_calls turned off."""
    raw = r.body.get("tool_choice")
    if raw is None:
        return "auto", None, True
    if not isinstance(raw, dict) or raw.get("type") not in KINDS:
        r.problem("tool_choice", "{\"type\": auto | any | tool | none}",
                  "tool_choice must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"tool\", "
                  "\"name\": ...} or {\"type\": \"none\"}", raw)
        return "auto", None, True
    nested = Reader(raw)
    parallel = not nested.boolean("disable_parallel_tool_use")
    name = nested.string("name")
    r.problems += [replace(p, field=f"tool_choice.{p.field}") for p in nested.problems]
    if raw["type"] != "tool":
        return raw["type"], None, parallel
    if name not in names:
        known = ", ".join(sorted(names)) or "none"
        r.problem("tool_choice.name", f"one of the tools' names ({known})",
                  f"tool_choice names {name!r}, which is not a tool in tools", name)
        return "auto", None, parallel
    return "tool", name, parallel
