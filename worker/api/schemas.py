"""Request bodies -> engine requests, with every problem listed.

One table of sampling fields serves the OpenAI routes; the pool-manager
contract has its own narrower table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from worker.api.problems import InvalidRequest, Problem, Reader
from worker.engine import SamplingParams
from worker.errors import WorkerError

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


@dataclass(frozen=True)
class ChatRequest:
    model: str | None
    messages: list[dict[str, str]]
    generation: Generation


@dataclass(frozen=True)
class CompletionRequest:
    model: str | None
    prompt: str
    generation: Generation


@dataclass(frozen=True)
class ExecuteRequest:
    job_id: str
    prompt: str
    generation: Generation


# OpenAI parameters this worker does not implement: refusing them beats ignoring them.
_UNSUPPORTED = {
    "tools": "tool calling is not supported",
    "functions": "function calling is not supported",
    "response_format": "structured output is not supported",
    "logprobs": "logprobs are not supported",
    "top_logprobs": "logprobs are not supported",
    "suffix": "suffix (infill) is not supported",
    "best_of": "best_of is not supported",
}


def _openai_sampling(r: Reader, n_vocab: int, base: SamplingParams) -> SamplingParams:
    """The request's sampling fields over `base` (the model's defaults): what the request names wins."""
    repeat = r.number("repeat_penalty", base.repeat_penalty, low=0, high=2)
    return replace(
        base,
        temperature=r.number("temperature", base.temperature, low=0, high=2, nullable=True),
        top_k=r.number("top_k", base.top_k, low=0, integer=True),
        top_p=r.number("top_p", base.top_p, low=0, high=1, nullable=True),
        min_p=r.number("min_p", base.min_p, low=0, high=1),
        repeat_penalty=r.number("repetition_penalty", repeat, low=0, high=2),
        repeat_last_n=r.number("repeat_last_n", base.repeat_last_n, low=0, high=4096, integer=True),
        presence_penalty=r.number("presence_penalty", base.presence_penalty, low=-2, high=2, nullable=True),
        frequency_penalty=r.number("frequency_penalty", base.frequency_penalty, low=-2, high=2, nullable=True),
        seed=r.number("seed", None, low=0, high=2**64 - 1, integer=True, nullable=True),
        logit_bias=_logit_bias(r, n_vocab),
    )


def sampling_defaults(table: dict[str, Any]) -> SamplingParams:
    """A models.toml sampling table, held to the same names and ranges as a request's fields."""
    r = Reader(table)
    params = _openai_sampling(r, 0, SamplingParams())
    if r.problems:
        raise WorkerError("models.toml sampling defaults: " + "; ".join(p.message for p in r.problems))
    return params


def _openai_generation(r: Reader, n_vocab: int, base: SamplingParams) -> Generation:
    for name, why in _UNSUPPORTED.items():
        if r.body.get(name) not in (None, False, [], {}):
            r.problem(name, "not supported", why, r.body[name])
    if r.number("n", 1, integer=True) not in (1, None):
        r.problem("n", "n == 1", "only n = 1 is supported", r.body.get("n"))
    if r.boolean("echo"):
        r.problem("echo", "echo == false", "echo is not supported", True)
    max_tokens = r.number("max_completion_tokens", None, low=1, high=2**31 - 1, integer=True, nullable=True)
    max_tokens = r.number("max_tokens", max_tokens, low=1, high=2**31 - 1, integer=True, nullable=True)
    sampling = _openai_sampling(r, n_vocab, base)
    stream = r.boolean("stream")
    options = r.body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        r.problem("stream_options", "an object", "stream_options must be an object", options)
        options = None
    include_usage = Reader(options or {}).boolean("include_usage")
    stop = r.stop_strings("stop", max_items=MAX_STOP_STRINGS, max_bytes=MAX_STOP_BYTES, allow_single=True)
    return Generation(max_tokens, sampling, stop, stream, include_usage)


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
        ok_token = isinstance(key, str) and key.isdigit() and int(key) < n_vocab
        ok_bias = isinstance(bias, (int, float)) and not isinstance(bias, bool) and -100 <= bias <= 100
        if not (ok_token and ok_bias):
            r.problem(f"logit_bias.{key}", constraint, f"logit_bias entry {key!r}: {bias!r} is out of range", bias)
            continue
        biases[int(key)] = float(bias)
    return biases


def _text_content(r: Reader, index: int, content: Any) -> str | None:
    """OpenAI content: a string, or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    r.problem(f"messages[{index}].content", "a string or text parts",
              "content must be a string or a list of text parts (only text is supported)", content)
    return None


# Checked before tokenizing: no sane text averages more than this many characters a token,
# so a longer prompt cannot fit and is refused without the work of tokenizing it.
MAX_CHARS_PER_TOKEN = 32


def check_prompt_size(field: str, chars: int, n_ctx_seq: int) -> None:
    limit = max(32768, MAX_CHARS_PER_TOKEN * n_ctx_seq)
    if chars > limit:
        raise InvalidRequest([Problem(field, f"at most {limit} characters",
                                      f"{field} has {chars} characters; a request holds {n_ctx_seq} tokens, "
                                      f"so at most {limit} characters are accepted", chars)],
                             code="context_length_exceeded")


def parse_chat(body: dict[str, Any], n_vocab: int, defaults: SamplingParams = SamplingParams()) -> ChatRequest:
    r = Reader(body)
    model = r.string("model")
    raw = r.body.get("messages")
    messages = []
    if not isinstance(raw, list) or not raw:
        r.problem("messages", "a non-empty list", "messages must be a non-empty list of {role, content}", raw)
    else:
        for i, message in enumerate(raw):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                r.problem(f"messages[{i}]", "{role, content}", "each message needs a string role", message)
                continue
            content = _text_content(r, i, message.get("content"))
            if content is not None:
                messages.append({"role": message["role"], "content": content})
    generation = _openai_generation(r, n_vocab, defaults)
    r.done()
    return ChatRequest(model, messages, generation)


def prompt_chars(request: ChatRequest | CompletionRequest) -> tuple[str, int]:
    if isinstance(request, ChatRequest):
        return "messages", sum(len(m["content"]) for m in request.messages)
    return "prompt", len(request.prompt)


def parse_completion(body: dict[str, Any], n_vocab: int, defaults: SamplingParams = SamplingParams()) -> CompletionRequest:
    r = Reader(body)
    model = r.string("model")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # the SDK's list form with a single prompt
    if not isinstance(prompt, str):
        r.problem("prompt", "a string", "prompt must be a string (or a list of exactly one string)", prompt)
    generation = _openai_generation(r, n_vocab, defaults)
    r.done()
    return CompletionRequest(model, prompt, generation)


def parse_execute(body: dict[str, Any], defaults: SamplingParams = SamplingParams()) -> ExecuteRequest:
    """The pool-manager contract's execute request over the model's sampling defaults; unknown fields are ignored."""
    r = Reader(body)
    job_id = r.string("job_id", required=True, min_length=1)
    prompt = r.string("prompt", required=True, min_length=1, max_length=32768)
    max_tokens = r.number("max_tokens", required=True, low=1, high=2048, integer=True)
    sampling = replace(
        defaults,
        temperature=r.number("temperature", defaults.temperature, low=0, high=2),
        top_p=r.number("top_p", defaults.top_p, low=0, high=1),
        top_k=r.number("top_k", defaults.top_k, low=0, integer=True),
        min_p=r.number("min_p", defaults.min_p, low=0, high=1),
        repeat_penalty=r.number("repetition_penalty", defaults.repeat_penalty, low=0, high=2),
        seed=r.number("seed", None, low=0, high=2**64 - 1, integer=True, nullable=True),
    )
    stop = r.stop_strings("stop", max_items=4, max_bytes=100, allow_single=False)
    r.done()
    return ExecuteRequest(job_id, prompt, Generation(max_tokens, sampling, stop, stream=True))
