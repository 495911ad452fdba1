"""What the API hands the engine and what the engine hands back: plain data."""

from __future__ import annotations

import ctypes
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.engine.media import MediaSpan
from worker.fields import DEFAULT_SAMPLERS


@dataclass(frozen=True)
class GrammarTrigger:
    """Where a lazy grammar wakes, in llama.cpp's kinds (common_grammar_trigger): `word`, once the answer writes that
    text; `pattern`, once a regex matches somewhere in the answer (the grammar starts at its first non-empty group,
    else where it matched); `pattern_full`, once the whole answer so far matches the regex."""

    kind: str  # word | pattern | pattern_full
    value: str


@dataclass(frozen=True)
class SamplingParams:
    """One request's sampler chain, in llama.cpp's terms (common_params_sampling; output/sampler.py builds it).

    The defaults are the neutral chain: the draw from the model's own distribution. temperature <= 0 means greedy;
    top_k 0, top_p 1, min_p 0, typical_p 1, top_n_sigma <= 0, xtc_probability 0, dry_multiplier 0, dynatemp_range
    0, mirostat 0, the penalties at their neutral values and an empty logit_bias each leave their stage out. A
    model's own defaults (llama-server's, its GGUF's, its models.toml entry's) are a SamplingParams the API makes once.
    """

    temperature: float = 1.0
    dynatemp_range: float = 0.0  # dynamic temperature: temperature +- range, by the candidates' entropy
    dynatemp_exponent: float = 1.0  # how that entropy maps to the temperature
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0  # locally typical sampling; 1 leaves the stage out
    top_n_sigma: float = -1.0  # keep the tokens within n standard deviations of the top logit
    xtc_probability: float = 0.0  # XTC: how often the most likely tokens above xtc_threshold go, but the last
    xtc_threshold: float = 0.1
    min_keep: int = 0  # the stages that cut candidates keep at least this many
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0  # DRY: a token extending a repeat loses multiplier * base^(length - allowed)
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64  # the tokens DRY looks back over
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", "\"", "*")  # text that ends a repeated sequence
    mirostat: int = 0  # 1 or 2: Mirostat's version replaces the samplers with temperature, then its own draw
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    samplers: tuple[str, ...] = DEFAULT_SAMPLERS  # the stages' order, by llama.cpp's names (worker/fields.py)
    seed: int | None = None  # None: a fresh random seed per request
    logit_bias: dict[int, float] = field(default_factory=dict)
    # llama-server's ignore_eos: every end-of-generation token banned (a -inf bias), so the answer runs to max_tokens
    # or a stop string; what benchmark clients send to fix an answer's length.
    ignore_eos: bool = False
    grammar: str | None = None  # GBNF (root rule "root") the output must match; checked by Engine.grammar_problem
    # Set: `grammar` is lazy. The answer is free until it writes one of the triggers, and the grammar's root starts
    # there (lazy_grammar.py): tool_choice auto's calls.
    grammar_triggers: tuple[GrammarTrigger, ...] = ()
    # None: `grammar` is the answer's, and a thinking model's reasoning is left free. A tuple: `grammar` describes the
    # whole output, reasoning included, from the chat template's opening of the answer on: the grammar accepts these
    # tokens (that opening, already in the prompt) before the first sampled one, as llama.cpp's chat layer means it
    # (a forced tool call's grammar, serving/chat.py).
    grammar_prefill: tuple[int, ...] | None = None
    # A thinking model's reasoning ends after this many tokens: the end-of-thinking marker is written for it and
    # the answer follows (core/token_output.py). None: it thinks as long as it likes; 0: it answers at once.
    reasoning_budget: int | None = None
    # Speculative decoding: drafted tokens a step may verify for this request, at most the worker's --draft-max
    # (None: that); 0 turns drafting off. Drafts never change the text where the load-time check allows them.
    draft_max: int | None = None


@dataclass(frozen=True)
class Reasoning:
    """Where a thinking model's reasoning starts and ends in its output, as its chat template writes it (llama.cpp's
    thinking tags: <think>, gpt-oss's analysis channel, ...). The output passes through whole; stop strings and a
    grammar of the answer see only what follows the reasoning (output/reasoning.py), and a reasoning budget ends it
    by writing `end_tokens`."""

    start_tag: str
    end_tags: tuple[str, ...]
    opened_in_prompt: bool  # the template's opening of the answer ends with start_tag: the output starts reasoning
    end_tokens: tuple[int, ...]  # the first end tag in this vocabulary: what a spent budget writes


@dataclass(frozen=True)
class Chat:
    """A chat as its model's template takes it, in llama-server's terms (serving/chat_template.py)."""

    # OpenAI's messages: role, content (text, an image's MEDIA_MARKER in it), an assistant's tool_calls (arguments as
    # JSON text) and reasoning_content, a tool result's tool_call_id
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI's function tools on offer
    tool_choice: str = "auto"  # auto | required | none
    only: str | None = None  # required: the one function a named tool_choice calls (the prompt shows every tool)
    parallel_tool_calls: bool = True
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # chat_template_kwargs, over the model's
    reasoning_effort: str | None = None  # handed to the template; "none" turns thinking off
    reasoning_format: str | None = None  # llama-server's, for this answer; None: the worker's --reasoning-format

    @property
    def continues(self) -> bool:
        """Whether the answer continues the chat's last message (llama-server's --prefill-assistant): an assistant's
        text or reasoning, without calls. An empty one, or one of tool calls, has nothing to continue: it is a turn
        of its own, and the answer opens the next (a chat of that message alone would render no prompt at all)."""
        last = self.messages[-1] if self.messages else {}
        return (last.get("role") == "assistant" and not last.get("tool_calls")
                and bool(last.get("content") or last.get("reasoning_content")))


@dataclass(frozen=True)
class ExtraFile:
    """Another file's text a fill-in-the-middle prompt holds (llama-server's input_extra; serving/infill.py)."""

    filename: str
    text: str


@dataclass(frozen=True)
class ChatPrompt:
    tokens: list[int]  # with an image's stand-ins at its span (media.py)
    reasoning: Reasoning | None  # set where the chat template thinks
    media: tuple[MediaSpan, ...] = ()  # the images in it, in order (--mmproj)
    # Where a recurrent state is worth a checkpoint besides near the prompt's end (kv/checkpoints.py): where its
    # system prompt ends, which another conversation may share, and where its last user message starts.
    checkpoints: tuple[int, ...] = ()


@dataclass(frozen=True)
class AdapterSet:
    """The LoRA adapters a request runs under: (adapter id, scale) pairs, ids ascending, scales as llama.cpp's
    float32, none at 0.

    llama.cpp leaves an adapter at scale 0 out of the graph (llama_context::set_adapters_lora), so a set that only
    zeroes adapters is the base model's: the empty set. Equal sets compute alike, so they share llama_decode calls
    and prefix cache cells; different sets share neither."""

    scales: tuple[tuple[int, float], ...] = ()

    @classmethod
    def of(cls, scales: Mapping[int, float]) -> AdapterSet:
        as_float32 = ((adapter, ctypes.c_float(scale).value) for adapter, scale in scales.items())
        return cls(tuple(sorted((adapter, scale) for adapter, scale in as_float32 if scale != 0.0)))

    def __bool__(self) -> bool:
        return bool(self.scales)

    def __str__(self) -> str:
        return ",".join(f"{adapter}:{scale:g}" for adapter, scale in self.scales) or "base"


NO_ADAPTERS = AdapterSet()  # the base model alone


@dataclass(frozen=True)
class Request:
    prompt_tokens: list[int]
    max_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    request_id: str = ""
    timeout_s: float | None = None  # from submission; past it the request ends with TIMEOUT
    logprobs: int | None = None  # report each token's log probability and this many top alternatives
    reasoning: Reasoning | None = None  # a thinking model's: where its reasoning ends and its answer starts
    # Control tokens whose text the output shows (special tokens the chat format writes its calls and channels with,
    # llama.cpp's preserved tokens); every other control token writes nothing.
    preserved_tokens: frozenset[int] = frozenset()
    # Report each prompt token's log probability (after the first) and this many top alternatives: the prompt is
    # then prefilled whole, cached cells unused (they have no logits), before a PromptLogprobs event. max_tokens
    # may be 0 then: the prompt is scored and nothing is generated.
    prompt_logprobs: int | None = None
    # The prompt's images: their positions in prompt_tokens hold stand-ins, and their embeddings are encoded and
    # decoded there by the engine thread (core/runner.py).
    media: tuple[MediaSpan, ...] = ()
    adapters: AdapterSet = NO_ADAPTERS  # LoRA adapters of the worker's (--lora) this request runs under
    # Read these tokens' logits at the prompt's last row (a rerank's yes and no, pooling/rerank.py) and send them in
    # a Scored event once the prompt is prefilled; with max_tokens 0 nothing is generated.
    score_tokens: tuple[int, ...] = ()
    checkpoints: tuple[int, ...] = ()  # ChatPrompt.checkpoints


class FinishReason(str, enum.Enum):
    EOS = "eos"  # the model produced an end-of-generation token
    STOP = "stop"  # a stop string matched
    LENGTH = "length"  # max_tokens or the sequence's context ran out
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    ERROR = "error"


@dataclass(frozen=True)
class Alternative:
    piece: bytes  # the bytes the token adds to the text
    logprob: float  # log-softmax of the model's raw logits, before any sampler stage


@dataclass(frozen=True)
class TokenLogprob:
    piece: bytes
    logprob: float
    top: tuple[Alternative, ...]  # the most likely tokens at this position, best first


@dataclass(frozen=True)
class TokenEvent:
    """New text: whole UTF-8 characters that can no longer be part of a stop string, as the model wrote them (a
    thinking model's reasoning and its tags included: a chat's answer is read from it, api/chat_reply.py).

    `tokens` counts the tokens generated so far; one event may carry the text of several.
    `logprobs` (when asked for) covers exactly the tokens whose bytes this text releases.
    """

    text: str
    tokens: int
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class PromptLogprobs:
    """The prompt's tokens as the model scores them, sent once the prompt is prefilled (before any TokenEvent).

    `first` is the first token's piece, which nothing predicts; `rest` scores each later token from the
    logits of the row before it.
    """

    first: bytes
    rest: tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class Scored:
    """The logits of a request's score_tokens at its prompt's last row, in their order."""

    logits: tuple[float, ...]


@dataclass(frozen=True)
class Finished:
    reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache, not prefilled
    stop_sequence: str | None = None
    message: str = ""  # why, for CANCELLED, TIMEOUT and ERROR
    queue_s: float = 0.0  # submit -> admitted to a slot
    ttft_s: float = 0.0  # submit -> first generated token
    decode_s: float = 0.0  # first token -> last token
    draft_tokens: int = 0  # speculative decoding: drafted tokens verified
    draft_accepted: int = 0  # of those, accepted (each one a generated token that took no step of its own)

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Generated tokens per second after the first (None with fewer than two tokens)."""
        return (self.completion_tokens - 1) / self.decode_s if self.decode_s > 0 else None


Event = TokenEvent | PromptLogprobs | Scored | Finished
