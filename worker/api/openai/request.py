"""OpenAI's chat and completion request bodies -> the chat turn and the completion the routes run, with every
problem listed. Sampling fields are read by their table (worker/fields.py): the OpenAI routes' rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from worker.api.adapters import read_lora
from worker.api.generation_fields import (
    MAX_STOP_BYTES,
    MAX_STOP_STRINGS,
    ChatRequest,
    Generation,
    check_ending,
    earlier_reasoning,
    read_reasoning_format,
    read_sampling,
    read_template_kwargs,
)
from worker.api.images import (
    AudioInput,
    ImageInput,
    ImageLink,
    MediaIntake,
    audio_from_part,
    image_from_url,
    without_marker,
)
from worker.api.problems import Reader, integral
from worker.api.reasoning_budgets import effort_budget
from worker.api.structured import openai_grammar
from worker.api.tools.request import history_fields, read_tools
from worker.engine import Media, SamplingParams
from worker.fields import OPENAI_SAMPLING

ROLES = ("system", "developer", "user", "assistant", "tool")  # chat message roles, as OpenAI's


@dataclass(frozen=True)
class CompletionRequest:
    model: str | None
    prompt: str | list[int]  # text, or token ids as sent (lm-eval sends its own tokenizer's)
    generation: Generation
    suffix: str | None = None  # fill in the middle: the text after the completion, which the prompt comes before

    def prompt_chars(self) -> tuple[str, int]:
        """The field that holds the prompt, and its length in characters (checked before tokenizing)."""
        return "prompt", len(self.prompt)


# OpenAI parameters this worker does not implement: refusing them beats ignoring them.
_UNSUPPORTED = {
    "functions": "the deprecated functions field is not supported; send tools",
    "function_call": "the deprecated function_call field is not supported; send tools and tool_choice",
}
MAX_TOP_LOGPROBS = 20  # chat's top_logprobs, as OpenAI's
MAX_COMPLETION_LOGPROBS = 5  # completions' logprobs, as OpenAI's


def _openai_sampling(r: Reader, n_vocab: int, base: SamplingParams) -> SamplingParams:
    return replace(read_sampling(r, OPENAI_SAMPLING, base), logit_bias=_logit_bias(r, n_vocab),
                   ignore_eos=r.boolean("ignore_eos"))


def _openai_generation(r: Reader, n_vocab: int, base: SamplingParams, max_choices: int, loras: int,
                       least_tokens: int = 1) -> Generation:
    """`loras`: the worker's LoRA adapters; `least_tokens`: the smallest max_tokens (completions take 0: the prompt
    alone, scored or cached)."""
    for name, why in _UNSUPPORTED.items():
        if r.body.get(name) not in (None, False, [], {}):
            r.problem(name, "not supported", why, r.body[name])
    n = r.number("n", 1, low=1, integer=True, nullable=True) or 1
    if n > max_choices:
        r.problem("n", f"n <= {max_choices}", f"n = {n} choices run side by side, and this worker has "
                  f"{max_choices} slots (--parallel)", n)
    max_tokens = r.number("max_completion_tokens", None, low=least_tokens, high=2**31 - 1, integer=True,
                          nullable=True)
    max_tokens = r.number("max_tokens", max_tokens, low=least_tokens, high=2**31 - 1, integer=True, nullable=True)
    sampling = replace(_openai_sampling(r, n_vocab, base), grammar=openai_grammar(r))
    stream = r.boolean("stream")
    options = r.body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        r.problem("stream_options", "an object", "stream_options must be an object", options)
        options = None
    nested = Reader(options or {})
    include_usage = nested.boolean("include_usage")
    r.problems += [replace(p, field=f"stream_options.{p.field}") for p in nested.problems]
    stop = r.stop_strings("stop", max_items=MAX_STOP_STRINGS, max_bytes=MAX_STOP_BYTES, allow_single=True)
    # the field that gave the grammar, named where the model's vocabulary refuses it
    grammar_field = "grammar" if r.body.get("grammar") else "response_format"
    return Generation(max_tokens, sampling, stop, stream, include_usage, n, lora=read_lora(r, loras),
                      grammar_field=grammar_field)


def _chat_logprobs(r: Reader) -> int | None:
    wanted = r.boolean("logprobs")
    top = r.number("top_logprobs", None, low=0, high=MAX_TOP_LOGPROBS, integer=True, nullable=True)
    if top is not None and not wanted:
        r.problem("top_logprobs", "logprobs == true", "top_logprobs needs logprobs: true", top)
    return (top or 0) if wanted else None


def _completion_extras(r: Reader, generation: Generation) -> Generation:
    """Completions' own fields: logprobs as a count, echo (with logprobs, the prompt's logprobs too), and best_of
    (only as many as n: nothing is ranked)."""
    logprobs = r.number("logprobs", None, low=0, high=MAX_COMPLETION_LOGPROBS, integer=True, nullable=True)
    echo = r.boolean("echo")
    if echo and generation.n > 1:
        # The prompt is prefilled (and scored) in one slot; the other choices copy its cells.
        r.problem("echo", "echo with n == 1", f"echo repeats (and with logprobs, scores) the prompt once: send it "
                  f"with n = 1, not n = {generation.n}", True)
    best_of = r.number("best_of", None, low=1, integer=True, nullable=True)
    if best_of not in (None, generation.n):
        r.problem("best_of", f"best_of == n ({generation.n})",
                  "best_of may only equal n: choices are returned, not ranked", best_of)
    return replace(generation, logprobs=logprobs, echo=echo)


def _logit_bias(r: Reader, n_vocab: int) -> dict[int, float]:
    raw = r.body.get("logit_bias")
    if raw is None:
        return {}
    constraint = f"token ids 0..{n_vocab - 1} mapped to -100 <= bias <= 100"
    if not isinstance(raw, dict):
        r.problem("logit_bias", constraint, "logit_bias must be an object of token id -> bias", raw)
        return {}
    biases = {}
    for key, bias in raw.items():
        # isascii: "²" and other Unicode digits pass isdigit() but not int().
        ok_token = isinstance(key, str) and key.isascii() and key.isdigit() and int(key) < n_vocab
        ok_bias = isinstance(bias, (int, float)) and not isinstance(bias, bool) and -100 <= bias <= 100
        if not (ok_token and ok_bias):
            r.problem(f"logit_bias.{key}", constraint, f"logit_bias entry {key!r}: {bias!r} is out of range", bias)
            continue
        biases[int(key)] = float(bias)
    return biases


CONTENT_FORMS = "a string or a list of text, image_url and input_audio parts"


def _content(r: Reader, index: int, content: Any, media: list[ImageInput | ImageLink | AudioInput],
             intake: MediaIntake) -> str | None:
    """OpenAI content: a string, or a list of {"type": "text", "text": ...}, {"type": "image_url", "image_url":
    {"url": "data:..."}} and {"type": "input_audio", "input_audio": {"data": ..., "format": "wav"}} parts. An image
    or a clip becomes the marker the projector replaces, its bytes (or the URL an image is read from) added to
    `media`; a clip the model cannot hear is refused, saying why."""
    where = f"messages[{index}].content"
    if isinstance(content, str):
        return without_marker(content)
    if not isinstance(content, list):
        r.problem(where, CONTENT_FORMS, f"content must be {CONTENT_FORMS}", content)
        return None
    pieces = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            pieces.append(without_marker(part["text"]))
        elif kind == "image_url" and isinstance(part.get("image_url"), dict):
            image = image_from_url(r, f"{where}[{i}].image_url.url", part["image_url"].get("url"), intake.settings)
            if image is not None:
                media.append(image)
                pieces.append(Media.MARKER)
        elif kind == "input_audio" and "audio" not in intake.modalities:
            r.problem(f"{where}[{i}]", "a text or image_url part", f"{where}[{i}]: {intake.no_audio()}", kind)
        elif kind == "input_audio":
            clip = audio_from_part(r, f"{where}[{i}].input_audio", part.get("input_audio"), intake.settings)
            if clip is not None:
                media.append(clip)
                pieces.append(Media.MARKER)
        else:
            r.problem(f"{where}[{i}]", "a text, image_url or input_audio part", "each content part must be "
                      "{\"type\": \"text\", \"text\": ...}, {\"type\": \"image_url\", \"image_url\": {\"url\": "
                      "\"data:...\"}} or {\"type\": \"input_audio\", \"input_audio\": {\"data\": ..., \"format\": "
                      "\"wav\"}}", kind)
    return "".join(pieces)


def parse_chat(body: dict[str, Any], n_vocab: int, defaults: SamplingParams = SamplingParams(),
               max_choices: int = 1, loras: int = 0, intake: MediaIntake = MediaIntake()) -> ChatRequest:
    """`loras`: how many LoRA adapters the worker has (a `lora` list names them by id); `intake`: what images may be
    and where from, and what the model takes."""
    r = Reader(body)
    model = r.string("model")
    raw = r.body.get("messages")
    messages = []
    images: list[ImageInput | ImageLink | AudioInput] = []
    if not isinstance(raw, list) or not raw:
        r.problem("messages", "a non-empty list", "messages must be a non-empty list of {role, content}", raw)
    else:
        for i, message in enumerate(raw):
            if not isinstance(message, dict):
                r.problem(f"messages[{i}]", "{role, content}", "each message must be an object", message)
                continue
            role = message.get("role")
            if role not in ROLES:
                # An unknown role renders as text the model never saw in training: it may never stop.
                r.problem(f"messages[{i}].role", f"one of {', '.join(ROLES)}",
                          f"messages[{i}].role must be one of {', '.join(ROLES)}", role)
            tool_fields = history_fields(r, i, message)
            # An assistant message that only calls tools has no content.
            calls_only = role == "assistant" and message.get("tool_calls") and message.get("content") is None
            content = "" if calls_only else _content(r, i, message.get("content"), images, intake)
            if role in ROLES and content is not None:
                # developer stays developer: llama.cpp's chat layer makes it system for templates that want so.
                messages.append({"role": role, "content": content, **tool_fields,
                                 **earlier_reasoning(r, f"messages[{i}]", message)})
        check_ending(r, messages)
    generation = _openai_generation(r, n_vocab, defaults, max_choices, loras)
    generation = replace(generation, logprobs=_chat_logprobs(r), sampling=effort_budget(r, generation.sampling))
    tools = read_tools(r)
    if tools is not None and tools.forced and generation.sampling.grammar is not None:
        r.problem("tool_choice", "no grammar or JSON response_format beside a forced call",
                  "a forced tool call samples under its own grammar; send tool_choice auto, or no grammar "
                  "and no JSON response_format", r.body.get("tool_choice"))
    if r.boolean("echo"):
        r.problem("echo", "echo == false", "echo is a completions field; chat does not repeat the messages", True)
    template_kwargs = read_template_kwargs(r)
    effort = r.body.get("reasoning_effort") if isinstance(r.body.get("reasoning_effort"), str) else None
    reasoning_format = read_reasoning_format(r)
    r.done()
    return ChatRequest(model, messages, generation, template_kwargs, tools, effort, reasoning_format,
                       images=tuple(images))


def parse_completion(body: dict[str, Any], n_vocab: int, defaults: SamplingParams = SamplingParams(),
                     max_choices: int = 1, loras: int = 0) -> CompletionRequest:
    r = Reader(body)
    model = r.string("model")
    prompt = _prompt(r, n_vocab)
    for name in ("reasoning_budget", "reasoning_effort"):
        if r.body.get(name) is not None:
            r.problem(name, "not on completions", f"{name} bounds a chat turn's thinking: a completion's prompt has "
                      "no reasoning split: send it to /v1/chat/completions, /v1/responses or /v1/messages",
                      r.body[name])
    generation = _completion_extras(r, _openai_generation(r, n_vocab, defaults, max_choices, loras,
                                                          least_tokens=0))
    suffix = _suffix(r, prompt, generation)
    r.done()
    return CompletionRequest(model, prompt, generation, suffix)


def _suffix(r: Reader, prompt: str | list[int], generation: Generation) -> str | None:
    """suffix: the completion fills the middle between the prompt and it (the model's FIM tokens), so the prompt is
    text and is not repeated."""
    if r.body.get("suffix") is None:
        return None
    suffix = r.string("suffix")
    if not isinstance(prompt, str):
        r.problem("suffix", "a text prompt", "suffix fills the middle after a text prompt: send the prompt as text, "
                  "not token ids", prompt)
    if generation.echo:
        r.problem("echo", "echo == false beside suffix", "echo repeats the prompt, and with a suffix the prompt is "
                  "a fill-in-the-middle one: send echo or suffix", True)
    return suffix


_PROMPT_FORMS = "a string, a list of token ids, or a list of exactly one of those"


def _prompt(r: Reader, n_vocab: int) -> str | list[int]:
    """The one prompt: text or token ids, alone or as the only item of a list (the SDK's and lm-eval's batch form)."""
    prompt = r.body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt:
        ids = [integral(t) for t in prompt]
        if all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab for t in ids):
            return ids
        r.problem("prompt", f"token ids 0..{n_vocab - 1}", f"a prompt of token ids holds integers 0..{n_vocab - 1}",
                  next(t for t in ids if not (isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n_vocab)))
    elif not isinstance(prompt, str):
        r.problem("prompt", _PROMPT_FORMS, f"prompt must be {_PROMPT_FORMS}", prompt)
    elif not prompt:
        r.problem("prompt", "1 <= len(prompt)", "prompt is empty: there is nothing to continue", prompt)
    return prompt if isinstance(prompt, str) else ""
