"""A Responses request read into the chat route's terms, with every problem listed under the Responses field names
(docs/agents-and-evals.md, "The Responses API (`/v1/responses`)").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from worker.api.generation_fields import ChatRequest
from worker.api.images import MediaIntake
from worker.api.openai.request import parse_chat
from worker.api.problems import InvalidRequest, Reader
from worker.api.responses.store import Message, ResponseStore
from worker.engine import SamplingParams
from worker.fields import OPENAI_SAMPLING

_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "text")
_DROPPED = ("reasoning",)  # earlier turns' reasoning: not part of the context, as chat templates leave it out
# Fields that would change the answer and are not implemented: refused, never ignored.
_UNSUPPORTED = {
    "background": "background responses are not supported: send stream or wait for the answer",
    "conversation": "conversations are not supported: send previous_response_id",
    "prompt": "prompt templates are not supported",
    "max_tool_calls": "max_tool_calls is not supported",
    "top_logprobs": "logprobs are not supported on /v1/responses: use /v1/chat/completions",
}
TRUNCATION = ("disabled",)


@dataclass(frozen=True)
class ResponsesRequest:
    chat: ChatRequest  # what runs: the chat turn
    conversation: list[Message]  # the messages without instructions: what a continuation's history starts with
    echoed: dict[str, Any]  # the request's own fields that the response object repeats
    store: bool
    stream: bool


# The request as a chat completions body (input items -> messages, instructions -> a system message first, a stored
# response's conversation before them, max_output_tokens -> max_tokens, the flat function tools -> chat's, text.format
# -> response_format), read by the chat route's own parser, so what a request may ask and gets is the chat route's.
# That parser's problems are renamed back to the fields the client sent.
def parse_responses(body: dict[str, Any], n_vocab: int, defaults: SamplingParams, max_choices: int,
                    store: ResponseStore, loras: int = 0,
                    intake: MediaIntake = MediaIntake()) -> ResponsesRequest:
    r = Reader(body)
    for name, why in _UNSUPPORTED.items():
        if r.body.get(name) not in (None, False):
            r.problem(name, "not supported", why, r.body[name])
    truncation = _optional(r, "truncation") or "disabled"
    if truncation not in TRUNCATION:
        r.problem("truncation", "disabled", "truncation must be \"disabled\": a prompt that does not fit is refused, "
                  "never cut", truncation)
    instructions = _optional(r, "instructions")

    def renamed(text: str) -> str:  # a chat field (in text) as the Responses field the client sent
        return _field(text, 1 if instructions else 0, fields)

    previous = _previous(r, store)
    fields: dict[int, int] = {}
    messages = [*previous, *_input(r, body.get("input"), fields, len(previous))]
    stream, stored = r.boolean("stream"), r.boolean("store", True)
    metadata = r.body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        r.problem("metadata", "an object", "metadata must be an object of strings", metadata)
    user = _optional(r, "user")  # echoed in the response object, so a string (or null) as the schema says
    chat_body = {
        **{name: body[name] for name in ("model", "lora", *(f.name for f in OPENAI_SAMPLING)) if name in body},
        "messages": [{"role": "system", "content": instructions}, *messages] if instructions else messages,
        "max_tokens": body.get("max_output_tokens"),
        **_tools(r, body),
        **_text_format(r, body.get("text")),
        **_effort(r, body.get("reasoning")),
    }
    try:
        chat = parse_chat(chat_body, n_vocab, defaults, max_choices, loras, intake)
    except InvalidRequest as refused:
        r.problems += [replace(p, field=renamed(p.field), message=renamed(p.message)) for p in refused.problems]
        chat = None
    r.done()
    assert chat is not None  # else r.done() raised, with the chat's problems
    # an image read later (a URL's) names its Responses field in its problems
    chat = replace(chat, images=tuple(replace(image, field=renamed(image.field)) for image in chat.images),
                   generation=replace(chat.generation, grammar_field=renamed(chat.generation.grammar_field)),
                   prompt_field="input")
    echoed = {"instructions": instructions, "previous_response_id": body.get("previous_response_id"),
              "metadata": metadata or {}, "max_output_tokens": body.get("max_output_tokens"),
              "tools": body.get("tools") or [], "tool_choice": body.get("tool_choice") or "auto",
              "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
              "text": {"format": (body.get("text") or {}).get("format") or {"type": "text"}},
              "temperature": chat.generation.sampling.temperature, "top_p": chat.generation.sampling.top_p,
              "reasoning": {"effort": (body.get("reasoning") or {}).get("effort"), "summary": None},
              "truncation": truncation, "store": stored, "user": user}
    return ResponsesRequest(chat, messages, echoed, stored, stream)


def _optional(r: Reader, name: str) -> str | None:
    """A string field that may be absent or null, as the openai SDK sends what it was not given."""
    return r.string(name) if r.body.get(name) is not None else None


def _previous(r: Reader, store: ResponseStore) -> list[Message]:
    """The stored conversation that previous_response_id continues."""
    previous_id = _optional(r, "previous_response_id")
    if previous_id is None:
        return []
    stored = store.get(previous_id)
    if stored is None:
        r.problem("previous_response_id", "a stored response's id", f"previous_response_id {previous_id!r} is not a "
                  "stored response: it was never stored (store: false), was deleted, or was dropped (the store keeps "
                  "the most recent responses, in memory, until restart)", previous_id)
        return []
    return list(stored.conversation)


def _input(r: Reader, raw: Any, fields: dict[int, int], offset: int) -> list[Message]:
    """`input` as chat messages; `fields` learns which input item made each (message index + offset -> item)."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        r.problem("input", "a string or a non-empty list of items", "input must be a string or a non-empty list of "
                  "items (messages, function_call, function_call_output)", raw)
        return []
    messages: list[Message] = []
    for i, item in enumerate(raw):
        field = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            content = _content(r, f"{field}.content", item.get("content"), images=True)
            if item.get("role") not in _ROLES:
                r.problem(f"{field}.role", " or ".join(_ROLES), f"{field}.role must be one of {', '.join(_ROLES)}",
                          item.get("role"))
            elif content is not None:
                messages.append({"role": item["role"], "content": content})
        elif kind == "function_call":
            call = _call(r, field, item)
            last = messages[-1] if messages else None
            if call is not None and last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # the calls of one answer are one assistant turn
            elif call is not None:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = _content(r, f"{field}.output", item.get("output"))
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                r.problem(f"{field}.call_id", "a string", "a function_call_output names the call_id it answers",
                          call_id)
            elif output is not None:
                messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind in _DROPPED:
            continue
        else:
            r.problem(field, "a message, function_call or function_call_output item",
                      f"{field}: items of type {kind!r} are not supported (messages, function_call, "
                      "function_call_output and reasoning are)", kind)
        fields.setdefault(len(messages) - 1 + offset, i)
    return messages


def _content(r: Reader, field: str, content: Any, images: bool = False) -> str | list[dict[str, Any]] | None:
    """Text, or a list of text parts joined (input_text, output_text); with `images` (a message's content), a list
    that holds input_image or input_audio parts too becomes chat content parts, whose images and clips the chat
    reader reads. Other parts (files) are refused."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) and all(isinstance(p, dict) for p in content) else None
    texts = [isinstance(p.get("text"), str) for p in parts or [] if p.get("type") in _TEXT_PARTS]
    n_media = sum(p.get("type") in _MEDIA_PARTS for p in parts or []) if images else 0
    if parts is not None and all(texts) and len(texts) + n_media == len(parts):  # [] is "", as before images
        if not n_media:
            return "".join(p["text"] for p in parts)
        return [_chat_part(p) for p in parts]
    kinds = "input_text, input_image and input_audio parts" if images else "input_text parts"
    r.problem(field, f"a string or a list of {kinds}", f"{field} must be a string or a list of {kinds}", content)
    return None


_MEDIA_PARTS = ("input_image", "input_audio")


def _chat_part(part: dict[str, Any]) -> dict[str, Any]:
    """A Responses content part as chat's: text, an image_url, or the input_audio part as it is."""
    if part["type"] in _TEXT_PARTS:
        return {"type": "text", "text": part["text"]}
    if part["type"] == "input_image":
        return {"type": "image_url", "image_url": {"url": part.get("image_url")}}
    return {"type": "input_audio", "input_audio": part.get("input_audio")}


def _call(r: Reader, field: str, item: dict[str, Any]) -> dict[str, Any] | None:
    nested = Reader(item)
    call_id = nested.string("call_id", required=True, min_length=1)
    name = nested.string("name", required=True, min_length=1)
    arguments = nested.string("arguments", required=True)
    r.problems += [replace(p, field=f"{field}.{p.field}") for p in nested.problems]
    if nested.problems:
        return None
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tools(r: Reader, body: dict[str, Any]) -> dict[str, Any]:
    """Responses' flat function tools ({type, name, description, parameters, strict}) and tool_choice, as chat's."""
    tools = body.get("tools")
    chat: dict[str, Any] = {"parallel_tool_calls": body.get("parallel_tool_calls")}
    if isinstance(tools, list):
        chat["tools"] = [{"type": tool.get("type"), "function": {k: v for k, v in tool.items() if k != "type"}}
                         if isinstance(tool, dict) else tool for tool in tools]
    elif tools is not None:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        if isinstance(choice.get("name"), str):
            chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
        else:
            r.problem("tool_choice.name", "a function in tools", "tool_choice names the function to call",
                      choice.get("name"))
    elif isinstance(choice, dict):
        r.problem("tool_choice.type", "function", "tool_choice must be none, auto, required or "
                  "{\"type\": \"function\", \"name\": ...}: only function tools exist here", choice.get("type"))
    elif choice is not None:
        chat["tool_choice"] = choice
    return chat


def _text_format(r: Reader, text: Any) -> dict[str, Any]:
    """text.format ({type: text | json_object | json_schema, name, schema, strict}) as chat's response_format."""
    if text is None:
        return {}
    if not isinstance(text, dict):
        r.problem("text", "{\"format\": {...}}", "text must be an object {\"format\": {\"type\": ...}}", text)
        return {}
    spec = text.get("format")
    if not isinstance(spec, (dict, type(None))):
        r.problem("text.format", "{\"type\": ...}", "text.format must be an object {\"type\": ...}", spec)
        return {}
    if spec is None or spec.get("type") != "json_schema":
        return {"response_format": spec} if spec is not None else {}
    schema = {k: spec[k] for k in ("name", "schema", "strict") if k in spec}
    return {"response_format": {"type": "json_schema", "json_schema": schema}}


def _effort(r: Reader, reasoning: Any) -> dict[str, Any]:
    """reasoning.effort as chat's reasoning_effort (a thinking budget, worker/api/reasoning_budgets.py)."""
    if reasoning is None:
        return {}
    if not isinstance(reasoning, dict):
        r.problem("reasoning", "{\"effort\": ...}", "reasoning must be an object {\"effort\": ...}", reasoning)
        return {}
    return {"reasoning_effort": reasoning.get("effort")}


# The chat parser's field names -> the Responses request's.
_RENAMES = [
    (re.compile(r"^response_format\.json_schema\b"), "text.format"),
    (re.compile(r"^response_format\b"), "text.format"),
    (re.compile(r"^max_tokens\b"), "max_output_tokens"),
    (re.compile(r"^reasoning_effort\b"), "reasoning.effort"),
    (re.compile(r"^(tools\[\d+\])\.function\b"), r"\1"),
    (re.compile(r"^tool_choice\.function\b"), "tool_choice"),
]
_MESSAGE = re.compile(r"\bmessages(\[(\d+)\])?")


def _field(text: str, shift: int, fields: dict[int, int]) -> str:
    """A chat field name (or a message naming one) as the Responses field it came from: messages[i] is the input
    item that made message i (instructions, when sent, made message 0)."""
    for pattern, name in _RENAMES:
        text = pattern.sub(name, text)

    def item(match: re.Match[str]) -> str:
        if match[2] is None:
            return "input"
        index = int(match[2]) - shift
        if index < 0:
            return "instructions"
        source = fields.get(index)
        return f"input[{source}]" if source is not None else "input"

    return _MESSAGE.sub(item, text)
