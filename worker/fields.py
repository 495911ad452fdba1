"""The sampling fields requests send, in one table: each field's name, type, range and what it sets. It drives the
request readers (api/generation_fields.py), the OpenAPI document (api/openapi.py, defaults from the engine's
SamplingParams) and models.toml's defaults (source/registry.py); narrower routes narrow the same rows.
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

    def narrowed(self, **changes: Any) -> NumberField:
        return replace(self, **changes)


TEMPERATURE = NumberField("temperature", "temperature", 0, 2, nullable=True)
TOP_K = NumberField("top_k", "top_k", 0, integer=True, nullable=True)
TOP_P = NumberField("top_p", "top_p", 0, 1, nullable=True)
MIN_P = NumberField("min_p", "min_p", 0, 1)
TYPICAL_P = NumberField("typical_p", "typical_p", 0, 1)
REPEAT_PENALTY = NumberField("repeat_penalty", "repeat_penalty", 0, 2)
# Hugging Face's name for llama.cpp's repeat_penalty; read after it, so it wins when both are sent.
REPETITION_PENALTY = NumberField("repetition_penalty", "repeat_penalty", 0, 2, per_model=False)
REPEAT_LAST_N = NumberField("repeat_last_n", "repeat_last_n", 0, 4096, integer=True)
PRESENCE_PENALTY = NumberField("presence_penalty", "presence_penalty", -2, 2, nullable=True)
FREQUENCY_PENALTY = NumberField("frequency_penalty", "frequency_penalty", -2, 2, nullable=True)
SEED = NumberField("seed", "seed", 0, 2**64 - 1, integer=True, nullable=True, per_model=False)
# A thinking model's reasoning tokens before the end-of-thinking marker is written for it (docs/agents-and-evals.md).
REASONING_BUDGET = NumberField("reasoning_budget", "reasoning_budget", 0, 2**31 - 1, integer=True, nullable=True)
# The most --draft-max and a request's draft_max may be: a step's rows grow with it.
MAX_DRAFT = 64
# Speculative decoding per request: at most this many drafted tokens a step (capped by --draft-max); 0: none.
DRAFT_MAX = NumberField("draft_max", "draft_max", 0, MAX_DRAFT, integer=True, nullable=True, per_model=False)

# The OpenAI routes' sampling fields (logit_bias, a map, is read beside them).
OPENAI_SAMPLING = (TEMPERATURE, TOP_K, TOP_P, MIN_P, TYPICAL_P, REPEAT_PENALTY, REPETITION_PENALTY, REPEAT_LAST_N,
                   PRESENCE_PENALTY, FREQUENCY_PENALTY, SEED, REASONING_BUDGET, DRAFT_MAX)
# The pool-manager contract's: fewer fields, and null only for the seed.
EXECUTE_SAMPLING = (TEMPERATURE.narrowed(nullable=False), TOP_P.narrowed(nullable=False),
                    TOP_K.narrowed(nullable=False), MIN_P, REPETITION_PENALTY, SEED)
# Anthropic's Messages API: its temperature stops at 1.
ANTHROPIC_SAMPLING = (TEMPERATURE.narrowed(high=1, nullable=False), TOP_P.narrowed(nullable=False),
                      TOP_K.narrowed(nullable=False))
# Ollama's `options` that sample (api/ollama/options.py reads the rest): its seed may be -1, "random".
OLLAMA_SAMPLING = (TEMPERATURE, TOP_K, TOP_P, MIN_P, TYPICAL_P, REPEAT_PENALTY, REPEAT_LAST_N, PRESENCE_PENALTY,
                   FREQUENCY_PENALTY, SEED)
# What a models.toml entry's sampling table may set.
MODEL_DEFAULTS = tuple(f.name for f in OPENAI_SAMPLING if f.per_model)
