"""The sampling fields requests send, in one table: each field's name, type, range, what it sets and the GGUF key a
model may default it by. It drives the request readers (api/generation_fields.py), the OpenAPI document
(api/openapi_parts.py), models.toml's defaults (source/registry.py), the GGUF's (api/model_sampling.py) and /props
(api/llama_server/props.py); narrower routes narrow the same rows. The names are llama-server's
(tools/server/server-schema.cpp), its limits too where it sets them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class NumberField:
    name: str  # as the request names it
    sets: str  # the SamplingParams attribute it sets
    low: float | None = None
    high: float | None = None
    integer: bool = False
    nullable: bool = False  # null means the default, as OpenAI's SDKs send it
    per_model: bool = True  # models.toml may default it (per-request ones like seed may not)
    gguf: str | None = None  # its key under general.sampling., where llama.cpp's converter writes one

    def narrowed(self, **changes: Any) -> NumberField:
        return replace(self, **changes)


@dataclass(frozen=True)
class OrderField:
    """llama.cpp's sampler stages in the order they run: a list of names (SAMPLER_NAMES) or a string of their letters
    (SAMPLER_LETTERS), as common_sampler_types_from_names / _from_chars read them; in a GGUF, names joined by ';'."""

    name: str
    sets: str
    max_items: int
    per_model: bool = True
    gguf: str | None = None


@dataclass(frozen=True)
class TextsField:
    """A non-empty list of non-empty strings of at most max_bytes UTF-8 bytes each."""

    name: str
    sets: str
    max_items: int
    max_bytes: int
    per_model: bool = True
    gguf: str | None = None


Field = NumberField | OrderField | TextsField

# llama.cpp's sampler stages by the names common_sampler_type_to_str gives them, each with the letter a `samplers`
# string spells it by (common_sampler_type_to_chr), in llama.cpp's default order (common_params_sampling.samplers).
SAMPLER_LETTERS = {"penalties": "e", "dry": "d", "top_n_sigma": "s", "top_k": "k", "typ_p": "y", "top_p": "p",
                   "min_p": "m", "xtc": "x", "temperature": "t"}
DEFAULT_SAMPLERS = tuple(SAMPLER_LETTERS)
# Every name common_sampler_types_from_names reads (it compares them lowercased): each name, its kebab-case and its
# spelling without underscores, and its three other aliases.
SAMPLER_NAMES = {alias: name for name in SAMPLER_LETTERS
                 for alias in (name, name.replace("_", "-"), name.replace("_", ""))} | {
    "nucleus": "top_p", "temp": "temperature", "typ": "typ_p"}

# The most tokens a stage that looks back (penalties, DRY) may look at: its history is allocated whole.
MAX_LOOKBACK = 4096

TEMPERATURE = NumberField("temperature", "temperature", 0, 2, nullable=True, gguf="temp")
# Dynamic temperature: between temperature - range and temperature + range, by the candidates' entropy.
DYNATEMP_RANGE = NumberField("dynatemp_range", "dynatemp_range", 0, 2)
DYNATEMP_EXPONENT = NumberField("dynatemp_exponent", "dynatemp_exponent", 0, 10)
TOP_K = NumberField("top_k", "top_k", 0, integer=True, nullable=True, gguf="top_k")
TOP_P = NumberField("top_p", "top_p", 0, 1, nullable=True, gguf="top_p")
MIN_P = NumberField("min_p", "min_p", 0, 1, gguf="min_p")
TYPICAL_P = NumberField("typical_p", "typical_p", 0, 1)
TOP_N_SIGMA = NumberField("top_n_sigma", "top_n_sigma")  # <= 0 leaves its stage out (llama-server sends -1)
XTC_PROBABILITY = NumberField("xtc_probability", "xtc_probability", 0, 1, gguf="xtc_probability")
XTC_THRESHOLD = NumberField("xtc_threshold", "xtc_threshold", 0, 1, gguf="xtc_threshold")
MIN_KEEP = NumberField("min_keep", "min_keep", 0, 2**31 - 1, integer=True)
REPEAT_PENALTY = NumberField("repeat_penalty", "repeat_penalty", 0, 2, gguf="penalty_repeat")
# Hugging Face's name for llama.cpp's repeat_penalty; read after it, so it wins when both are sent.
REPETITION_PENALTY = NumberField("repetition_penalty", "repeat_penalty", 0, 2, per_model=False)
REPEAT_LAST_N = NumberField("repeat_last_n", "repeat_last_n", 0, MAX_LOOKBACK, integer=True, gguf="penalty_last_n")
PRESENCE_PENALTY = NumberField("presence_penalty", "presence_penalty", -2, 2, nullable=True)
FREQUENCY_PENALTY = NumberField("frequency_penalty", "frequency_penalty", -2, 2, nullable=True)
# DRY ("don't repeat yourself"): a token that would extend a repeated sequence past dry_allowed_length tokens loses
# dry_multiplier * dry_base ^ (length - dry_allowed_length) of its logit; the breakers end a sequence.
DRY_MULTIPLIER = NumberField("dry_multiplier", "dry_multiplier", 0, 5)
DRY_BASE = NumberField("dry_base", "dry_base", 1, 10)  # below 1 llama-server silently uses 1.75: a 400 here
DRY_ALLOWED_LENGTH = NumberField("dry_allowed_length", "dry_allowed_length", 0, MAX_LOOKBACK, integer=True)
DRY_PENALTY_LAST_N = NumberField("dry_penalty_last_n", "dry_penalty_last_n", 0, MAX_LOOKBACK, integer=True)
# llama.cpp cuts a breaker at 40 bytes (with a warning): a longer one is a 400 here.
DRY_SEQUENCE_BREAKERS = TextsField("dry_sequence_breakers", "dry_sequence_breakers", 64, 40)
MIROSTAT = NumberField("mirostat", "mirostat", 0, 2, integer=True, gguf="mirostat")  # 1, 2: Mirostat's versions
MIROSTAT_TAU = NumberField("mirostat_tau", "mirostat_tau", 0, 100, gguf="mirostat_tau")  # the target surprise, bits
MIROSTAT_ETA = NumberField("mirostat_eta", "mirostat_eta", 0, 1, gguf="mirostat_eta")  # its learning rate
SAMPLERS = OrderField("samplers", "samplers", 32, gguf="sequence")
SEED = NumberField("seed", "seed", 0, 2**64 - 1, integer=True, nullable=True, per_model=False)
# A thinking model's reasoning tokens before the end-of-thinking marker is written for it (docs/agents-and-evals.md).
REASONING_BUDGET = NumberField("reasoning_budget", "reasoning_budget", 0, 2**31 - 1, integer=True, nullable=True)
# The most --draft-max and a request's draft_max may be: a step's rows grow with it.
MAX_DRAFT = 64
# Speculative decoding per request: at most this many drafted tokens a step (capped by --draft-max); 0: none.
DRAFT_MAX = NumberField("draft_max", "draft_max", 0, MAX_DRAFT, integer=True, nullable=True, per_model=False)

# llama-server's sampling fields that a model defaults (all but its seed, random unless a request sends one): what
# its /props reports, under its names.
LLAMA_SERVER_SAMPLING: tuple[Field, ...] = (
    TEMPERATURE, TOP_K, TOP_P, MIN_P, TYPICAL_P, REPEAT_PENALTY, REPEAT_LAST_N, PRESENCE_PENALTY, FREQUENCY_PENALTY,
    DYNATEMP_RANGE, DYNATEMP_EXPONENT, TOP_N_SIGMA, XTC_PROBABILITY, XTC_THRESHOLD, MIN_KEEP, DRY_MULTIPLIER, DRY_BASE,
    DRY_ALLOWED_LENGTH, DRY_PENALTY_LAST_N, DRY_SEQUENCE_BREAKERS, MIROSTAT, MIROSTAT_TAU, MIROSTAT_ETA, SAMPLERS)
# The OpenAI routes' sampling fields (logit_bias, a map, is read beside them).
OPENAI_SAMPLING: tuple[Field, ...] = (*LLAMA_SERVER_SAMPLING, REPETITION_PENALTY, SEED, REASONING_BUDGET, DRAFT_MAX)
# The pool-manager contract's: fewer fields, and null only for the seed.
EXECUTE_SAMPLING = (TEMPERATURE.narrowed(nullable=False), TOP_P.narrowed(nullable=False),
                    TOP_K.narrowed(nullable=False), MIN_P, REPETITION_PENALTY, SEED)
# Anthropic's Messages API: its temperature stops at 1.
ANTHROPIC_SAMPLING = (TEMPERATURE.narrowed(high=1, nullable=False), TOP_P.narrowed(nullable=False),
                      TOP_K.narrowed(nullable=False))
# Ollama's `options` that sample (api/ollama/options.py reads the rest): its seed may be -1, "random".
OLLAMA_SAMPLING = (TEMPERATURE, TOP_K, TOP_P, MIN_P, TYPICAL_P, REPEAT_PENALTY, REPEAT_LAST_N, PRESENCE_PENALTY,
                   FREQUENCY_PENALTY, MIROSTAT, MIROSTAT_TAU, MIROSTAT_ETA, SEED)
# What a models.toml entry's sampling table may set.
MODEL_DEFAULTS = tuple(f.name for f in OPENAI_SAMPLING if f.per_model)
# What a GGUF's general.sampling.* keys may set (llama.cpp's common_init_sampler_from_model reads the same keys).
GGUF_PREFIX = "general.sampling."
GGUF_SAMPLING = tuple(f for f in OPENAI_SAMPLING if f.gguf)
