"""llama.cpp's sampler stages by the names a request's `samplers` lists (worker/fields.py): each one's native stage as
common_sampler_init makes it (common/sampling.cpp), or none where the request's settings leave it neutral, so that a
stage that would change nothing is not in the chain at all."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import llama_cpp

from worker.engine.requests import SamplingParams


@dataclass(frozen=True)
class StageContext:
    """What some stages need of the model and of the request besides its settings."""

    vocab: llama_cpp.llama_vocab_p | None  # DRY tokenizes its sequence breakers (None: a chain without a model)
    n_vocab: int
    native_seed: int  # the 32-bit seed of the stages that roll dice (output/seeded_draw.py's native_seed)


Stage = Callable[[SamplingParams, StageContext], "llama_cpp.llama_sampler_p | None"]


def penalties(p: SamplingParams, context: StageContext) -> llama_cpp.llama_sampler_p | None:
    if p.repeat_last_n == 0 or (p.repeat_penalty, p.frequency_penalty, p.presence_penalty) == (1.0, 0.0, 0.0):
        return None
    return llama_cpp.llama_sampler_init_penalties(context.n_vocab, p.repeat_last_n, p.repeat_penalty,
                                                  p.frequency_penalty, p.presence_penalty)


def dry(p: SamplingParams, context: StageContext) -> llama_cpp.llama_sampler_p | None:
    if p.dry_multiplier == 0 or p.dry_penalty_last_n == 0:
        return None
    # llama.cpp tokenizes the breakers here and keeps its own copy: the array need not outlive the call.
    breakers = (ctypes.c_char_p * len(p.dry_sequence_breakers))(*(b.encode() for b in p.dry_sequence_breakers))
    return llama_cpp.llama_sampler_init_dry(context.vocab, p.dry_multiplier, p.dry_base, p.dry_allowed_length,
                                            p.dry_penalty_last_n, breakers, len(breakers))


def top_n_sigma(p: SamplingParams, _context: StageContext) -> llama_cpp.llama_sampler_p | None:
    return llama_cpp.llama_sampler_init_top_n_sigma(p.top_n_sigma) if p.top_n_sigma > 0 else None


def top_k(p: SamplingParams, _context: StageContext) -> llama_cpp.llama_sampler_p | None:
    return llama_cpp.llama_sampler_init_top_k(p.top_k) if p.top_k > 0 else None


def typical(p: SamplingParams, _context: StageContext) -> llama_cpp.llama_sampler_p | None:
    return llama_cpp.llama_sampler_init_typical(p.typical_p, p.min_keep) if p.typical_p < 1 else None


def top_p(p: SamplingParams, _context: StageContext) -> llama_cpp.llama_sampler_p | None:
    return llama_cpp.llama_sampler_init_top_p(p.top_p, p.min_keep) if p.top_p < 1 else None


def min_p(p: SamplingParams, _context: StageContext) -> llama_cpp.llama_sampler_p | None:
    return llama_cpp.llama_sampler_init_min_p(p.min_p, p.min_keep) if p.min_p > 0 else None


def xtc(p: SamplingParams, context: StageContext) -> llama_cpp.llama_sampler_p | None:
    if p.xtc_probability <= 0 or p.xtc_threshold > 0.5:  # above 0.5 no two tokens can both pass it: XTC is off
        return None
    return llama_cpp.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, context.native_seed)


def temperature(p: SamplingParams, _context: StageContext) -> llama_cpp.llama_sampler_p | None:
    if p.temperature == 1 and p.dynatemp_range <= 0:
        return None
    return llama_cpp.llama_sampler_init_temp_ext(p.temperature, p.dynatemp_range, p.dynatemp_exponent)


STAGES: dict[str, Stage] = {"penalties": penalties, "dry": dry, "top_n_sigma": top_n_sigma, "top_k": top_k,
                            "typ_p": typical, "top_p": top_p, "min_p": min_p, "xtc": xtc, "temperature": temperature}
# The stages that move a token's logit by what came before it, so may change which token is the most likely: a
# greedy request keeps these (in its order); the others only cut the tail, rescale, or roll dice.
REPEAT_STAGES = ("penalties", "dry")

# Mirostat's own draws, by version: each cuts the candidates by an estimate of the distribution's shape, to keep
# the text's surprise near tau; version 1 estimates it from the MIROSTAT_M most likely tokens, as llama.cpp's chain.
MIROSTAT_M = 100
MIROSTATS: dict[int, Stage] = {
    1: lambda p, context: llama_cpp.llama_sampler_init_mirostat(
        context.n_vocab, context.native_seed, p.mirostat_tau, p.mirostat_eta, MIROSTAT_M),
    2: lambda p, context: llama_cpp.llama_sampler_init_mirostat_v2(context.native_seed, p.mirostat_tau,
                                                                   p.mirostat_eta),
}


def lookback(p: SamplingParams, names: tuple[str, ...]) -> int:
    """How many of the prompt's last tokens the stages `names` look back over (penalties and DRY see the prompt first,
    as llama-server's do)."""
    reach = {"penalties": p.repeat_last_n, "dry": p.dry_penalty_last_n}
    return max((reach[name] for name in names if name in reach), default=0)
