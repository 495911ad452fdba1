"""A Messages request read into the chat route's terms (a ChatRequest), with every problem listed. The conversation
becomes OpenAI's message form, which the chat template and the tool-calling engine read
(docs/api.md, "Anthropic's Messages API").
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from worker.api.adapters import read_lora
from worker.api.anthropic.output import output_grammar
from worker.api.anthropic.tools import read_tools
from worker.api.generation_fields import MAX_STOP_BYTES, MAX_STOP_STRINGS, ChatRequest, Generation, read_sampling
from worker.api.images import NO_FETCH, ImageInput, image_from_base64, without_marker
from worker.api.problems import Reader
from worker.api.reasoning_budgets import thinking_budget
from worker.engine import Media, SamplingParams
from worker.fields import ANTHROPIC_SAMPLING
from worker.settings import MediaSettings

Message = dict[str, Any]
Block = dict[str, Any]

# Request fields that would change the answer and are not implemented: refused, never ignored.
_UNSUPPORTED = {"mcp_servers": "MCP servers are not supported"}
_REFUSED_BLOCKS = {
    "document": "documents are not supported yet",
    "search_result": "search results are not supported",
}
ANSWERED_CALLS = "a user message with the results of the tool_use blocks before it"
# An earlier turn's thinking goes to the chat template as that message's reasoning_content: most templates leave it
# out of the context, as Anthropic does, and those that keep it (interleaved thinking beside tool calls) show it.
# Redacted thinking has no text to show.
_THINKING = ("thinking", "redacted_thinking")
# The blocks each place takes.
_SYSTEM, _USER, _RESULT = ("text",), ("text", "image", "tool_result"), ("text",)
_ASSISTANT = ("text", "tool_use", *_THINKING)


def parse_messages(body: dict[str, Any], defaults: SamplingParams = SamplingParams(), counting: bool = False,
                   thinks: bool = False, loras: int = 0, media: MediaSettings = MediaSettings()) -> ChatRequest:
    """A Messages request over the model's sampling defaults; `counting`: a count_tokens request, which
    generates nothing and so names no max_tokens; `thinks`: the model's replies have reasoning to budget;
    `loras`: how many LoRA adapters the worker has (a `lora` list names them by id); `media`: the image limits."""
    r = Reader(body)
    model = r.string("model")
    for name, why in _UNSUPPORTED.items():
        if r.body.get(name) not in (None, [], {}):
            r.problem(name, "not supported", why, r.body[name])
    metadata = r.body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        r.problem("metadata", "an object", "metadata must be an object", metadata)
    messages, images = _conversation(r, media)
    max_tokens = r.number("max_tokens", required=not counting, low=1, high=2**31 - 1, integer=True)
    sampling = replace(read_sampling(r, ANTHROPIC_SAMPLING, defaults), grammar=output_grammar(r))
    sampling = thinking_budget(r, sampling, max_tokens, thinks)
    stop = r.stop_strings("stop_sequences", max_items=MAX_STOP_STRINGS, max_bytes=MAX_STOP_BYTES, allow_single=False)
    stream = r.boolean("stream")
    lora = read_lora(r, loras)
    tools = read_tools(r)
    if tools is not None and tools.forced and sampling.grammar is not None:
        r.problem("tool_choice", "no output_config.format beside a forced tool use",
                  "a forced tool use samples under its own grammar: send tool_choice auto, or no output_config.format",
                  r.body.get("tool_choice"))
    r.done()
    generation = Generation(max_tokens, sampling, stop, stream, lora=lora, grammar_field="output_config.format")
    return ChatRequest(model, messages, generation, tools=tools, images=tuple(images))


def _conversation(r: Reader, media: MediaSettings) -> tuple[list[Message], list[ImageInput]]:
    """The chat template's messages (the system prompt first) and the user messages' images in the order their
    markers stand in the messages. A final assistant message is a prefill: the answer continues it."""
    messages: list[Message] = []
    images: list[ImageInput] = []
    system = r.body.get("system")
    if system is not None and (blocks := _blocks(r, "system", system, _SYSTEM)) is not None:
        messages.append({"role": "system", "content": _joined(blocks)})
    raw = r.body.get("messages")
    if not isinstance(raw, list) or not raw:
        r.problem("messages", "a non-empty list", "messages must be a non-empty list of {role, content}", raw)
        return messages, images
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            r.problem(f"messages[{i}]", "{role, content}", "each message must be an object {role, content}", message)
            continue
        role, field = message.get("role"), f"messages[{i}].content"
        if role == "user":
            if (blocks := _blocks(r, field, message.get("content"), _USER)) is not None:
                messages += _user_turn(blocks)
                images += _images(r, field, blocks, media)
        elif role == "assistant":
            if (blocks := _blocks(r, field, message.get("content"), _ASSISTANT)) is not None:
                messages.append(_assistant_turn(blocks))
        else:
            r.problem(f"messages[{i}].role", "user or assistant",
                      "role must be user or assistant (a system prompt goes in the top-level system field)", role)
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant" and "tool_calls" in last:
        r.problem(f"messages[{len(raw) - 1}]", ANSWERED_CALLS,
                  "the last message calls tools: send their tool_result blocks in a user message after it", None)
    return messages, images


def _blocks(r: Reader, field: str, content: Any, allowed: tuple[str, ...]) -> list[Block] | None:
    """Content as a list of checked blocks (a string is one text block); None when any block is refused."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        r.problem(field, "a string or a list of content blocks",
                  f"{field} must be a string or a list of content blocks", content)
        return None
    problems = len(r.problems)
    for i, block in enumerate(content):
        _check_block(r, f"{field}[{i}]", block, allowed)
    return content if len(r.problems) == problems else None


def _check_block(r: Reader, field: str, block: Any, allowed: tuple[str, ...]) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str) or kind not in (*allowed, *_REFUSED_BLOCKS, "tool_use", "tool_result", "image"):
        r.problem(field, f"a block of type {' or '.join(allowed)}",
                  'a content block must be {"type": "text", "text": a string}' if allowed == ("text",)
                  else f"a content block's type must be one of {', '.join(allowed)}", block)
    elif kind in _REFUSED_BLOCKS:
        r.problem(field, f"a block of type {' or '.join(allowed)}", f"{kind} blocks: {_REFUSED_BLOCKS[kind]}", kind)
    elif kind not in allowed:
        belongs = "assistant" if kind == "tool_use" else "user"
        r.problem(field, f"a block of type {' or '.join(allowed)}", f"{kind} blocks belong in {belongs} messages",
                  kind)
    elif kind == "image":
        source = block.get("source")
        if not (isinstance(source, dict) and source.get("type") == "base64"):
            r.problem(f"{field}.source", "a base64 source", "an image block's source must be {\"type\": \"base64\", "
                      f"\"media_type\": \"image/png\", \"data\": ...}}: {NO_FETCH}",
                      source.get("type") if isinstance(source, dict) else source)
    elif kind == "text" and not isinstance(block.get("text"), str):
        r.problem(f"{field}.text", "a string", "a text block's text must be a string", block.get("text"))
    elif kind == "thinking" and not isinstance(block.get("thinking"), str):
        r.problem(f"{field}.thinking", "a string", "a thinking block's thinking must be a string",
                  block.get("thinking"))
    elif kind == "tool_use":
        _check_fields(r, field, block, {"id": str, "name": str, "input": dict})
    elif kind == "tool_result":
        _check_fields(r, field, block, {"tool_use_id": str})
        if not isinstance(block.get("is_error", False), bool):
            r.problem(f"{field}.is_error", "a boolean", "is_error must be true or false", block["is_error"])
        if block.get("content") is not None:
            _blocks(r, f"{field}.content", block["content"], _RESULT)


def _check_fields(r: Reader, field: str, block: Block, types: dict[str, type]) -> None:
    for name, kind in types.items():
        value = block.get(name)
        if not isinstance(value, kind) or value == "":
            what = "an object" if kind is dict else "a non-empty string"
            r.problem(f"{field}.{name}", what, f"a {block['type']} block's {name} must be {what}", value)


def _images(r: Reader, field: str, blocks: list[Block], media: MediaSettings) -> list[ImageInput]:
    """A user message's image blocks, read and checked (their sources were checked with the blocks)."""
    images = []
    for i, block in enumerate(blocks):
        if block["type"] == "image":
            image = image_from_base64(r, f"{field}[{i}].source.data", block["source"].get("data"), media)
            images += [image] if image is not None else []
    return images


def _joined(blocks: list[Block]) -> str:
    """Text blocks joined as chat joins text parts."""
    return "".join(block["text"] for block in blocks if block["type"] == "text")


def _user_turn(blocks: list[Block]) -> list[Message]:
    """A user message: its tool results as tool messages and its text as user messages, in the order the blocks
    came."""
    turn: list[Message] = []
    for block in blocks:
        if block["type"] == "tool_result":
            turn.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": _result(block)})
        else:
            # An image stands in the text as the marker the projector replaces (api/images.py).
            text = Media.MARKER if block["type"] == "image" else without_marker(block["text"])
            if turn and turn[-1]["role"] == "user":
                turn[-1]["content"] += text
            else:
                turn.append({"role": "user", "content": text})
    return turn


def _result(block: Block) -> str:
    """A tool result's text; a failed tool's says so, as the model has no other way to know."""
    content = block.get("content")
    text = content if isinstance(content, str) else _joined(content or [])
    return f"Error: {text}" if block.get("is_error") else text


# An assistant's tool_use blocks are its tool_calls, their input as a JSON string, as OpenAI sends arguments.
def _assistant_turn(blocks: list[Block]) -> Message:
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": json.dumps(b["input"], ensure_ascii=False)}}
             for b in blocks if b["type"] == "tool_use"]
    thinking = "".join(b.get("thinking", "") for b in blocks if b["type"] == "thinking")
    return {"role": "assistant", "content": _joined(blocks), **({"tool_calls": calls} if calls else {}),
            **({"reasoning_content": thinking} if thinking else {})}
