"""Ollama's /api/chat and /api/generate bodies -> the chat turn (or raw prompt) the routes run, with every problem
listed. Messages become OpenAI's form, which the chat template and the tool-calling engine read; Ollama's tool calls
carry no ids, so each gets one here and a tool result answers the first open call of its tool_name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from worker.api.generation_fields import ChatRequest, Generation
from worker.api.images import ImageInput, image_from_base64, without_marker
from worker.api.ollama.options import Options, read_options
from worker.api.problems import Reader, finite
from worker.api.reasoning_budgets import EFFORT_BUDGETS
from worker.api.structured import checked_schema
from worker.api.tools.request import read_tools
from worker.engine import Media, SamplingParams
from worker.schema_grammar import object_grammar
from worker.settings import MediaSettings

ROLES = ("system", "user", "assistant", "tool")
THINK_LEVELS = ("low", "medium", "high")
MAX_TOP_LOGPROBS = 20
# A Go duration ("5m", "1h30m", "-1s") or a number of seconds, as keep_alive takes them.
_DURATION = re.compile(r"-?(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+|-?\d+(\.\d+)?")


@dataclass(frozen=True)
class Model:
    """What the routes are told of the served model, for reading a request."""

    n_ctx_seq: int
    defaults: SamplingParams  # the model's sampling defaults (models.toml)
    thinks: bool
    media: MediaSettings


@dataclass(frozen=True)
class OllamaRequest:
    chat: ChatRequest  # a raw generate's prompt is its one user message's content
    raw: bool  # /api/generate with raw: the prompt as sent, no chat template
    num_ctx: int | None  # options.num_ctx: the request's own bound on prompt + answer
    loads_only: bool  # no messages, or an empty prompt: Ollama's way to load a model, answered done_reason "load"


def text(r: Reader, name: str) -> str:
    """An optional string field; null and absent are both empty."""
    return r.string(name, "") if r.body.get(name) is not None else ""


def model_name(name: Any) -> Any:
    """Ollama names a model `name:tag` and `name` means `name:latest`: the served model answers to both."""
    return name[: -len(":latest")] if isinstance(name, str) and name.endswith(":latest") else name


def _common(r: Reader, model: Model) -> tuple[Options, Generation, str | None]:
    """The fields /api/chat and /api/generate share: options, format, think, stream, logprobs, keep_alive. With
    them, the reasoning effort `think` asks for (ChatRequest.reasoning_effort)."""
    options = read_options(r, model.defaults, model.n_ctx_seq)
    sampling = replace(options.sampling, grammar=_format(r))
    sampling, effort = _think(r, sampling, model.thinks)
    stream = r.boolean("stream", True)
    logprobs = _logprobs(r)
    keep_alive(r)
    return options, Generation(options.max_tokens, sampling, options.stop, stream, logprobs=logprobs,
                                 grammar_field="format"), effort


def keep_alive(r: Reader) -> None:
    """Checked, and then it changes nothing: the worker holds its one model for its life (docs/api.md)."""
    value = r.body.get("keep_alive")
    ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value)) or (
        isinstance(value, str) and _DURATION.fullmatch(value) is not None)
    if not ok:
        r.problem("keep_alive", "a duration (\"5m\") or seconds", "keep_alive must be a duration such as \"5m\" or "
                  "a number of seconds", value)


def _format(r: Reader) -> str | None:
    """format: "json" (any JSON object), a JSON schema, or "" / null for free text."""
    value = r.body.get("format")
    if value in (None, ""):
        return None
    if value == "json":
        return object_grammar()
    if isinstance(value, dict):
        return checked_schema(r, "format", value)
    r.problem("format", "\"json\" or a JSON schema", "format must be \"json\" or a JSON schema object", value)
    return None


def _think(r: Reader, sampling: SamplingParams, thinks: bool) -> tuple[SamplingParams, str | None]:
    """think: true (the model's own length), false (answer at once: thinking turned off), or low / medium / high as
    the reasoning effort (a template that reads it, as gpt-oss's; elsewhere a budget, reasoning_budgets.EFFORT_BUDGETS).
    A model that does not think cannot be asked to, as Ollama refuses it."""
    value = r.body.get("think")
    if value is None or value is False:
        return (replace(sampling, reasoning_budget=0), "none") if value is False and thinks else (sampling, None)
    if value is not True and value not in THINK_LEVELS:
        r.problem("think", "true, false, low, medium or high", "think must be true, false, \"low\", \"medium\" or "
                  "\"high\"", value)
        return sampling, None
    if not thinks:
        r.problem("think", "a model that thinks", "this model does not think (llama.cpp finds no reasoning in its "
                  "chat template): send no think, or think: false", value)
        return sampling, None
    if value is True:
        return sampling, None
    return replace(sampling, reasoning_budget=EFFORT_BUDGETS[value]), value


def _logprobs(r: Reader) -> int | None:
    wanted = r.boolean("logprobs")
    top = r.number("top_logprobs", None, low=0, high=MAX_TOP_LOGPROBS, integer=True, nullable=True)
    if top and not wanted:
        r.problem("top_logprobs", "logprobs == true", "top_logprobs needs logprobs: true", top)
    return (top or 0) if wanted else None


def _images(r: Reader, field: str, raw: Any, media: MediaSettings) -> list[ImageInput]:
    """A list of base64 images; each is read and checked."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        r.problem(field, "a list of base64 images", f"{field} must be a list of base64-encoded images", raw)
        return []
    images = [image_from_base64(r, f"{field}[{i}]", item, media) for i, item in enumerate(raw)]
    return [image for image in images if image is not None]


def parse_chat(body: dict[str, Any], model: Model) -> OllamaRequest:
    r = Reader(body)
    name = model_name(r.string("model"))
    options, generation, effort = _common(r, model)
    messages, images = _messages(r, model.media)
    tools = read_tools(r)
    if tools is not None and generation.sampling.grammar is not None:
        # The answer is either free to call or held to the format, not both.
        r.problem("format", "no format beside tools", "format holds the whole answer to one shape, so no tool call "
                  "could be written: send tools or format, not both", r.body.get("format"))
    r.done()
    chat = ChatRequest(name, messages, generation, tools=tools, reasoning_effort=effort, images=tuple(images))
    return OllamaRequest(chat, False, options.num_ctx, not messages)


def _messages(r: Reader, media: MediaSettings) -> tuple[list[dict[str, Any]], list[ImageInput]]:
    raw = r.body.get("messages")
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        r.problem("messages", "a list of {role, content}", "messages must be a list of {role, content}", raw)
        return [], []
    messages: list[dict[str, Any]] = []
    images: list[ImageInput] = []
    calls = _Calls()
    for i, message in enumerate(raw):
        field = f"messages[{i}]"
        if not isinstance(message, dict):
            r.problem(field, "{role, content}", f"{field} must be an object {{role, content}}", message)
            continue
        role, content = message.get("role"), message.get("content", "")
        if role not in ROLES:
            r.problem(f"{field}.role", " | ".join(ROLES), f"{field}.role must be one of {', '.join(ROLES)}", role)
            continue
        if content is None:
            content = ""
        if not isinstance(content, str):
            r.problem(f"{field}.content", "a string", f"{field}.content must be a string", content)
            continue
        pictures = _images(r, f"{field}.images", message.get("images"), media)
        images += pictures
        nested = Reader(message)
        # An earlier turn's thinking goes to the template as its reasoning_content (most leave it out).
        tool_name, thinking = text(nested, "tool_name"), text(nested, "thinking")
        r.problems += [replace(p, field=f"{field}.{p.field}", message=f"{field}.{p.message}") for p in nested.problems]
        made = _checked_calls(r, field, message.get("tool_calls"))
        content = Media.MARKER * len(pictures) + without_marker(content)
        if role == "assistant":
            messages.append({"role": role, "content": content, **calls.made(made),
                             **({"reasoning_content": thinking} if thinking else {})})
        elif role == "tool":
            messages.append({"role": role, "content": content, "tool_call_id": calls.answered(tool_name or None)})
        else:
            messages.append({"role": role, "content": content})
    return messages, images


def _checked_calls(r: Reader, field: str, raw: Any) -> list[tuple[str, dict[str, Any]]]:
    """A message's tool_calls as (name, arguments); only an assistant's are its history, others are checked alone."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        r.problem(f"{field}.tool_calls", "a list of {function: {name, arguments}}", f"{field}.tool_calls must be a "
                  "list", raw)
        return []
    made = []
    for j, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments", {}) if isinstance(function, dict) else None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            r.problem(f"{field}.tool_calls[{j}]", "{function: {name, arguments: an object}}",
                      f"{field}.tool_calls[{j}] must be {{function: {{name: a string, arguments: an object}}}}", call)
            continue
        made.append((name, arguments))
    return made


class _Calls:
    """An assistant's tool calls, given ids in the order they come; a tool message answers the first open one of
    its tool_name (or the first open one at all)."""

    def __init__(self) -> None:
        self._open: list[tuple[str, str]] = []  # (id, function name)
        self._made = 0

    def made(self, made: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """An assistant's calls (name, arguments) in OpenAI's form, each with its id."""
        calls = []
        for name, arguments in made:
            call_id = f"call_{self._made}"
            self._made += 1
            self._open.append((call_id, name))
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}})
        return {"tool_calls": calls} if calls else {}

    def answered(self, tool_name: Any) -> str:
        for k, (call_id, name) in enumerate(self._open):
            if tool_name in (None, name):
                del self._open[k]
                return call_id
        return f"call_{tool_name or 'unmatched'}"  # a result of no call in the history: named by its tool


# Fields refused unless empty, each with the empty values it may take.
_GENERATE_REFUSED = {
    "suffix": (("", None), "suffix (fill-in-the-middle) is not supported"),
    "template": (("", None), "a Go template is not supported: the model's own chat template is used; send raw: true "
                             "with a prompt you formatted yourself"),
    "context": (([], None), "context (deprecated by Ollama) is not supported: send the conversation to /api/chat, "
                            "whose prefix cache reuses it"),
}


def parse_generate(body: dict[str, Any], model: Model) -> OllamaRequest:
    r = Reader(body)
    name = model_name(r.string("model"))
    for field, (empty, why) in _GENERATE_REFUSED.items():
        value = r.body.get(field)
        if not any(value == e and type(value) is type(e) for e in empty):
            r.problem(field, "not supported", why, value)
    options, generation, effort = _common(r, model)
    prompt, system = text(r, "prompt"), text(r, "system")
    raw = r.boolean("raw")
    images = _images(r, "images", r.body.get("images"), model.media)
    if raw and (images or system):
        r.problem("raw", "raw without images or system", "a raw prompt is sent as it is: its images and system "
                  "prompt would need the chat template; send raw: false, or write them into the prompt", True)
    r.done()
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": Media.MARKER * len(images) + without_marker(prompt or "")})
    chat = ChatRequest(name, messages, generation, reasoning_effort=effort, images=tuple(images))
    return OllamaRequest(chat, raw, options.num_ctx, not prompt)
