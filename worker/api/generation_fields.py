"""The fields every generation route shares: what a request boils down to (Generation), the chat turn that
Anthropic's and the Responses API's requests are read into (ChatRequest), and sampling read by its table
(worker/fields.py), each kind of field by its own reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from worker.api.images import AudioInput, ImageInput, ImageLink
from worker.api.problems import Reader
from worker.api.tools.request import Tools
from worker.engine import SamplingParams
from worker.fields import SAMPLER_LETTERS, SAMPLER_NAMES, Field, NumberField, OrderField, TextsField

MAX_STOP_STRINGS = 16
MAX_STOP_BYTES = 256


@dataclass(frozen=True)
class Generation:
    """What every generation route boils down to, before the prompt is tokenized."""

    max_tokens: int | None  # None: up to the end of the sequence's context
    sampling: SamplingParams
    stop: tuple[str, ...]
    stream: bool = False
    include_usage: bool = False
    n: int = 1  # choices, sampled side by side from one prefilled prompt
    logprobs: int | None = None  # None: none; k: each token's logprob and its k best alternatives
    echo: bool = False  # completions: the prompt leads the text
    lora: dict[int, float] | None = None  # the request's `lora` list, adapter id -> scale (api/adapters.py); None: none
    grammar_field: str = "grammar"  # the field that gave sampling.grammar, named where the vocabulary refuses it

    @property
    def scores_prompt(self) -> bool:
        """echo with logprobs: the prompt's tokens get their logprobs too (lm-eval's loglikelihood)."""
        return self.echo and self.logprobs is not None


@dataclass(frozen=True)
class ChatRequest:
    model: str | None
    # {role, content}, an assistant's tool_calls and reasoning_content, a tool's tool_call_id; a final assistant
    # message is continued (the answer's start: Anthropic's prefill, llama-server's --prefill-assistant)
    messages: list[dict[str, Any]]
    generation: Generation
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # chat_template_kwargs: template variables
    tools: Tools | None = None  # the tools on offer (None: none)
    # low, medium, ... (a template reads it, else it stands for a reasoning budget) or none (no thinking)
    reasoning_effort: str | None = None
    reasoning_format: str | None = None  # llama-server's, for this request (None: --reasoning-format)
    # in prompt order: each stands at a MEDIA_MARKER in a message's content; links are read before the turn is
    # prepared (media_links.py), so that a prepared turn holds only ImageInputs
    images: tuple[ImageInput | ImageLink | AudioInput, ...] = ()  # and clips, in the order of their markers
    prompt_field: str = "messages"  # the field that holds the chat, as a refusal of the whole prompt names it


# llama-server's --reasoning-format values, which a request's reasoning_format field may name.
REASONING_FORMATS = ("deepseek", "auto", "deepseek-legacy", "none")


def read_template_kwargs(r: Reader) -> dict[str, Any]:
    """chat_template_kwargs: variables the chat template reads, over the model's (enable_thinking a boolean, as
    llama-server holds it)."""
    kwargs = r.body.get("chat_template_kwargs")
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        r.problem("chat_template_kwargs", "an object", "chat_template_kwargs must be an object of template "
                  "variables, e.g. {\"enable_thinking\": false}", kwargs)
        return {}
    if not isinstance(kwargs.get("enable_thinking", False), bool):
        r.problem("chat_template_kwargs.enable_thinking", "true or false", "chat_template_kwargs.enable_thinking "
                  "must be a boolean", kwargs["enable_thinking"])
    return kwargs


def read_reasoning_format(r: Reader) -> str | None:
    """llama-server's reasoning_format field: how this answer's reasoning comes back (None: --reasoning-format)."""
    value = r.body.get("reasoning_format")
    if value is None or value in REASONING_FORMATS:
        return value
    r.problem("reasoning_format", f"one of {', '.join(REASONING_FORMATS)}",
              f"reasoning_format must be one of {', '.join(REASONING_FORMATS)}", value)
    return None


def earlier_reasoning(r: Reader, field: str, message: dict[str, Any]) -> dict[str, str]:
    """An assistant message's reasoning_content, for the templates that show earlier reasoning (the rest drop it)."""
    reasoning = message.get("reasoning_content")
    if reasoning is None or message.get("role") != "assistant":
        return {}
    if not isinstance(reasoning, str):
        r.problem(f"{field}.reasoning_content", "a string", f"{field}.reasoning_content must be a string", reasoning)
        return {}
    return {"reasoning_content": reasoning}


def check_ending(r: Reader, messages: list[dict[str, Any]]) -> None:
    """A final assistant message is continued (the answer starts with it), as llama-server does: one at most, and
    not one that calls tools, whose answer is their results."""
    if len(messages) >= 2 and messages[-1]["role"] == messages[-2]["role"] == "assistant":
        r.problem("messages", "one assistant message at the end at most", "the last two messages are the "
                  "assistant's: a final assistant message is continued, and only one can be", None)
    elif messages and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
        r.problem(f"messages[{len(messages) - 1}]", "no tool calls in a final assistant message",
                  "the last message calls tools: send their results (tool messages) after it, or leave it out",
                  None)


def read_sampling(r: Reader, fields: tuple[Field, ...], base: SamplingParams) -> SamplingParams:
    """The request's sampling `fields` over `base` (the model's defaults): what the request names wins."""
    values: dict[str, Any] = {}
    for f in fields:
        default = values.get(f.sets, getattr(base, f.sets))  # an alias read later falls back on the first
        values[f.sets] = _READERS[type(f)](r, f, default)
    return replace(base, **values)


def _number(r: Reader, f: NumberField, default: Any) -> Any:
    return r.number(f.name, default, low=f.low, high=f.high, integer=f.integer, nullable=f.nullable)


_ORDER_FORMS = "a list of sampler names or a string of their letters"


def _samplers(r: Reader, f: OrderField, default: tuple[str, ...]) -> tuple[str, ...]:
    """Stage names in their order: a list of names (any case, llama.cpp's aliases too) or a string of letters, each
    known one; an unknown one is a 400 naming the known (llama.cpp only warns and leaves it out)."""
    value = r.body.get(f.name)
    if value is None:
        return default
    by_letter = {letter: name for name, letter in SAMPLER_LETTERS.items()}
    if isinstance(value, str):
        known, spelled = by_letter, list(value)
    elif isinstance(value, list) and all(isinstance(name, str) for name in value):
        known, spelled = SAMPLER_NAMES, [name.lower() for name in value]
    else:
        r.problem(f.name, _ORDER_FORMS, f"{f.name} must be {_ORDER_FORMS}", value)
        return default
    constraint = (f"up to {f.max_items} of {', '.join(SAMPLER_LETTERS)} (or llama.cpp's aliases of them), or a "
                  f"string of their letters {''.join(by_letter)}")
    unknown = [name for name in spelled if name not in known]
    if len(spelled) > f.max_items:
        r.problem(f.name, constraint, f"{f.name} has {len(spelled)} samplers; it takes {constraint}", len(spelled))
    elif unknown:
        r.problem(f.name, constraint, f"{f.name} holds {', '.join(map(repr, unknown))}, not a sampler this worker "
                  f"runs; it takes {constraint}", unknown)
    else:
        return tuple(known[name] for name in spelled)
    return default


def _texts(r: Reader, f: TextsField, default: tuple[str, ...]) -> tuple[str, ...]:
    if r.body.get(f.name) is None:
        return default
    if r.body[f.name] == []:
        r.problem(f.name, "a non-empty list", f"{f.name} must hold at least one string", [])
        return default
    return r.stop_strings(f.name, max_items=f.max_items, max_bytes=f.max_bytes, allow_single=False) or default


_READERS: dict[type, Callable[[Reader, Any, Any], Any]] = {NumberField: _number, OrderField: _samplers,
                                                           TextsField: _texts}
