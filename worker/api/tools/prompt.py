"""The conversation as the chat template gets it: tool calls and results in the history, tools on offer, in the
template's own way or as llama.cpp's template polyfills give them (docs/api.md, "Tool calling").
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from worker.api.tools.formats import GENERIC_FORMAT, MISTRAL_FORMAT, ToolFormat, lists_tools, writes_calls
from worker.api.tools.request import Tools

Message = dict[str, Any]

CALL_FORM = '{"tool_calls": [{"name": "<tool name>", "arguments": {<its arguments>}}]}'
TOOL_LIST = ("You can call tools. Each line below is one tool: its name, what it does, "
             "and a JSON Schema of its arguments.")
CALL_ASK = ("To call tools, reply with only this JSON and nothing else:\n" + CALL_FORM + "\n"
            "Each result comes back in a later message. When no tool is needed, reply as usual.")
_MISTRAL_ID = re.compile(r"[a-zA-Z0-9]{9}")


# Where the format is the generic one, a system message (the fallback prompt) lists the tools, unless the template
# lists them itself, and asks for that JSON form.
def template_messages(messages: list[Message], fmt: ToolFormat, template: str | None,
                      tools: Tools | None) -> list[Message]:
    names = {call["id"]: call["function"]["name"] for m in messages for call in m.get("tool_calls", ())}
    native = writes_calls(template)
    shown = [_native(message, fmt) if native else _as_text(message, names) for message in messages]
    if tools is None or fmt is not GENERIC_FORMAT:
        return shown
    return _with_system(shown, CALL_ASK if lists_tools(template) else _tool_list(tools) + "\n\n" + CALL_ASK)


# A template that writes tool calls (it reads `tool_calls`): an assistant's calls as Hugging Face templates expect them,
# arguments as a JSON object (OpenAI sends a string; one that does not parse as an object is passed on as sent).
def _native(message: Message, fmt: ToolFormat) -> Message:
    if "tool_calls" in message:
        return {**message, "tool_calls": [
            {**call, "id": _call_id(call["id"], fmt), "function": {**call["function"],
                                                                   "arguments": _object(call["function"]["arguments"])}}
            for call in message["tool_calls"]]}
    if message["role"] == "tool":
        return {**message, "tool_call_id": _call_id(message["tool_call_id"], fmt)}
    return message


# A template written without tools, as llama.cpp's polyfills: each call as text in the generic JSON form, each tool
# result as a user message holding {"tool_response": ...}.
def _as_text(message: Message, names: dict[str, str]) -> Message:
    if "tool_calls" in message:
        calls = [{"name": c["function"]["name"], "arguments": _object(c["function"]["arguments"])}
                 for c in message["tool_calls"]]
        text = json.dumps({"tool_calls": calls}, ensure_ascii=False)
        return {"role": "assistant", "content": f"{message['content']}\n{text}" if message["content"] else text}
    if message["role"] == "tool":
        name = names.get(message["tool_call_id"])
        response = {"tool_call_id": message["tool_call_id"], **({"name": name} if name else {}),
                    "content": message["content"]}
        return {"role": "user", "content": json.dumps({"tool_response": response}, ensure_ascii=False)}
    return message


def _object(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _call_id(call_id: str, fmt: ToolFormat) -> str:
    """Mistral's template accepts only 9-letter-or-digit ids: ours (call_…) are mapped to one, the same each time."""
    if fmt is not MISTRAL_FORMAT or _MISTRAL_ID.fullmatch(call_id):
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def _tool_list(tools: Tools) -> str:
    lines = [json.dumps({"name": f.name, **({"description": f.description} if f.description else {}),
                         "parameters": f.parameters}, ensure_ascii=False) for f in tools.functions]
    return "\n".join([TOOL_LIST, *lines])


def _with_system(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
