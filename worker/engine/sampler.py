"""A request's SamplingParams as a native llama.cpp sampler chain.

The stage order is llama.cpp's own default (common/sampling.cpp): logit bias,
penalties, top-k, top-p, min-p, temperature, then the random draw. Neutral
settings leave their stage out, so greedy stays exactly greedy.
"""

from __future__ import annotations

import random

import llama_cpp

from worker.engine.requests import SamplingParams

# llama.cpp reads LLAMA_DEFAULT_SEED (0xFFFFFFFF) as "pick a random seed", so
# user seeds are folded into the 32-bit values below it.
_SEED_SPACE = 0xFFFFFFFF


def native_seed(seed: int | None) -> int:
    return random.randrange(_SEED_SPACE) if seed is None else seed % _SEED_SPACE


def build_chain(params: SamplingParams, n_vocab: int) -> tuple[llama_cpp.llama_sampler_p, bool]:
    """The chain, and whether it has a penalty stage (which must first see the prompt)."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = lambda stage: llama_cpp.llama_sampler_chain_add(chain, stage)  # noqa: E731

    if params.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(params.logit_bias))(
            *(llama_cpp.llama_logit_bias(token, bias) for token, bias in params.logit_bias.items())
        )
        add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(params.logit_bias), biases))
    penalized = (params.repeat_penalty, params.frequency_penalty, params.presence_penalty) != (1.0, 0.0, 0.0)
    if penalized:
        add(llama_cpp.llama_sampler_init_penalties(
            n_vocab, params.repeat_last_n, params.repeat_penalty,
            params.frequency_penalty, params.presence_penalty,
        ))
    if params.temperature <= 0:
        add(llama_cpp.llama_sampler_init_greedy())
        return chain, penalized
    if params.top_k > 0:
        add(llama_cpp.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
    add(llama_cpp.llama_sampler_init_temp(params.temperature))
    add(llama_cpp.llama_sampler_init_dist(native_seed(params.seed)))
    return chain, penalized


def free_chain(chain: llama_cpp.llama_sampler_p) -> None:
    llama_cpp.llama_sampler_free(chain)
