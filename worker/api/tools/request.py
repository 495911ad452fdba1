"""A chat request's tools, tool_choice and parallel_tool_calls, and the tool calls and results in its history. Only
function tools exist here: OpenAI's other kinds run on OpenAI's side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from worker.api.problems import Reader
from worker.api.structured import checked_schema as schema_problems  # response_format's check

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's rule for function names
CHOICES = ("none", "auto", "required")
_CHOICE = 'none, auto, required or {"type": "function", "function": {"name": ...}}'


@dataclass(frozen=True)
class Function:
    name: str
    description: str | None
    parameters: dict[str, Any]  # a JSON schema of the arguments, an object

    def as_tool(self) -> dict[str, Any]:
        """OpenAI's shape, as chat templates read their `tools` variable."""
        described = {"description": self.description} if self.description is not None else {}
        return {"type": "function", "function": {"name": self.name, **described, "parameters": self.parameters}}


@dataclass(frozen=True)
class Tools:
    functions: tuple[Function, ...]
    choice: str  # auto | required (a named function too) | none (shown to the model, its calls not read)
    only: str | None  # the function a named tool_choice forces
    parallel: bool  # parallel_tool_calls: an answer may hold several calls

    @property
    def forced(self) -> bool:
        """required or a named function: the answer is a call."""
        return self.choice == "required"

    @property
    def callable(self) -> tuple[Function, ...]:
        """The functions a forced call may name."""
        return tuple(f for f in self.functions if self.only in (None, f.name))


def read_tools(r: Reader) -> Tools | None:
    """The request's tools; None when there are none. With tool_choice none they are shown to the model, as
    llama-server shows them, and its answer is not read for calls."""
    raw = r.body.get("tools")
    functions: list[Function] = []
    schema_fields: dict[str, str] = {}
    if raw is not None and not isinstance(raw, list):
        r.problem("tools", "a list of tools", "tools must be a list of {\"type\": \"function\", \"function\"}", raw)
    for i, tool in enumerate(raw if isinstance(raw, list) else []):
        function = _function(r, f"tools[{i}]", tool)
        if function is not None:
            functions.append(function)
            schema_fields[function.name] = f"tools[{i}].function.parameters"
    choice, only = _choice(r, {f.name for f in functions})
    parallel = r.boolean("parallel_tool_calls", True)
    offered = isinstance(raw, list) and bool(raw)
    if choice == "required" and not offered:
        r.problem("tool_choice", "tools to choose from", f"tool_choice {choice!r} needs tools", r.body["tool_choice"])
    if not offered:
        return None
    tools = Tools(tuple(functions), choice, only=only, parallel=parallel)
    check_forced(r, tools, schema_fields)
    return tools


def check_forced(r: Reader, tools: Tools, schema_fields: dict[str, str]) -> None:
    """A forced call's arguments (tool_choice required, or a named function) are generated under the grammar of their
    schema (grammar.py): it must convert in full, as response_format's must.

    `schema_fields`: where each function's schema sits in the request, to name it in a problem."""
    if not tools.forced:
        return
    for function in tools.callable:
        schema_problems(r, schema_fields[function.name], function.parameters)


def _function(r: Reader, field: str, tool: Any) -> Function | None:
    if not isinstance(tool, dict):
        r.problem(field, '{"type": "function", "function"}', f"{field} must be an object", tool)
        return None
    if tool.get("type") != "function":
        r.problem(f"{field}.type", "function", f"{field}.type must be \"function\": only function tools are "
                  "supported", tool.get("type"))
        return None
    spec = tool.get("function")
    if not isinstance(spec, dict):
        r.problem(f"{field}.function", "{name, description, parameters}", f"{field}.function must be an object", spec)
        return None
    nested = Reader(spec)
    name = nested.string("name", required=True)
    description = nested.string("description")
    nested.boolean("strict")  # accepted: a forced call's arguments always follow the schema
    parameters = spec.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    elif not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        nested.problem("parameters", "a JSON schema of type object", "parameters must be a JSON schema of an "
                       "object (the arguments are one JSON object)", parameters)
    r.problems += [replace(p, field=f"{field}.function.{p.field}") for p in nested.problems]
    if isinstance(name, str) and not NAME.fullmatch(name):
        r.problem(f"{field}.function.name", "^[a-zA-Z0-9_-]{1,64}$", "a function name is 1 to 64 letters, digits, "
                  "_ and -", name)
    if nested.problems or not isinstance(name, str) or not NAME.fullmatch(name):
        return None
    return Function(name, description, {"type": "object", **parameters})


def _choice(r: Reader, names: set[str]) -> tuple[str, str | None]:
    """tool_choice as (none | auto | required, the one function it names)."""
    raw = r.body.get("tool_choice")
    if raw is None:
        return "auto", None
    if raw in CHOICES:
        return raw, None
    spec = raw.get("function") if isinstance(raw, dict) and raw.get("type") == "function" else None
    if not isinstance(spec, dict):
        r.problem("tool_choice", _CHOICE, f"tool_choice must be one of {_CHOICE}", raw)
        return "auto", None
    name = spec.get("name")
    if name not in names:
        known = ", ".join(sorted(names)) or "none"
        r.problem("tool_choice.function.name", f"one of the tools' names ({known})",
                  f"tool_choice names {name!r}, which is not a function in tools", name)
        return "auto", None
    return "required", name


def history_fields(r: Reader, index: int, message: dict[str, Any]) -> dict[str, Any]:
    """A history message's tool fields: an assistant's tool_calls, a tool result's tool_call_id."""
    field = f"messages[{index}]"
    role = message.get("role")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            r.problem(f"{field}.tool_call_id", "a string", "a tool message needs the tool_call_id of the call "
                      "it answers", call_id)
            return {}
        return {"tool_call_id": call_id}
    calls = message.get("tool_calls")
    if role != "assistant" or calls in (None, []):
        return {}
    if not isinstance(calls, list):
        r.problem(f"{field}.tool_calls", "a list of tool calls", f"{field}.tool_calls must be a list", calls)
        return {}
    checked = [_history_call(r, f"{field}.tool_calls[{i}]", call) for i, call in enumerate(calls)]
    return {"tool_calls": checked} if all(checked) else {}


def _history_call(r: Reader, field: str, call: Any) -> dict[str, Any] | None:
    """One call as OpenAI writes it: {id, type: function, function: {name, arguments: a JSON string}}."""
    spec = call.get("function") if isinstance(call, dict) else None
    problems = len(r.problems)
    if not isinstance(spec, dict):
        r.problem(f"{field}.function", "{name, arguments}", f"{field} must be {{\"type\": \"function\", "
                  "\"function\": {\"name\", \"arguments\"}}", call)
        return None
    if call.get("type", "function") != "function":
        r.problem(f"{field}.type", "function", f"{field}.type must be \"function\"", call.get("type"))
    for key in ("name", "arguments"):
        if not isinstance(spec.get(key), str):
            r.problem(f"{field}.function.{key}", "a string", f"{field}.function.{key} must be a string", spec.get(key))
    if not isinstance(call.get("id", ""), str):
        r.problem(f"{field}.id", "a string", f"{field}.id must be a string", call.get("id"))
    if len(r.problems) > problems:
        return None
    return {"id": call.get("id", ""), "type": "function",
            "function": {"name": spec["name"], "arguments": spec["arguments"]}}
