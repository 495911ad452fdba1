"""Each of llama.cpp's sampler stages, as the worker builds a request's chain (worker/engine/output/sampler.py), on a
distribution chosen here: the chain is applied to a llama_token_data_array made in Python, no model needed, and what
survives (or is drawn) is what llama.cpp's own stage makes of it (src/llama-sampler.cpp)."""

from __future__ import annotations

import ctypes
import math
from dataclasses import replace

import llama_cpp
import numpy as np
import pytest

from worker.engine import SamplingParams
from worker.engine.output.sampler import Sampler, build_chain
from worker.engine.output.seeded_draw import NATIVE_RANDOM, native_seed
from worker.engine.output.stages import STAGES
from worker.fields import DEFAULT_SAMPLERS, SAMPLER_LETTERS


class Candidates:
    """One step's candidates, as llama_sampler_sample hands them to a chain."""

    def __init__(self, logits: list[float]) -> None:
        self.data = (llama_cpp.llama_token_data * len(logits))(
            *(llama_cpp.llama_token_data(token, logit, 0.0) for token, logit in enumerate(logits)))
        self.array = llama_cpp.llama_token_data_array(self.data, len(logits), -1, False)

    def through(self, sampler: Sampler) -> Candidates:
        llama_cpp.llama_sampler_apply(sampler.chain, ctypes.byref(self.array))
        return self

    @property
    def survivors(self) -> dict[int, float]:
        """Token -> logit of the candidates the chain left: those in the array (XTC moves its start past the ones it
        drops, top-k shortens it) whose logit a stage did not mask to -inf (top-n-sigma)."""
        found = ((self.array.data[i].id, self.array.data[i].logit) for i in range(self.array.size))
        return {token: logit for token, logit in found if logit != -math.inf}

    @property
    def drawn(self) -> int:
        return self.array.data[self.array.selected].id


def sampler(params: SamplingParams, n_vocab: int, history: tuple[int, ...] = ()) -> Sampler:
    """A sequence's sampler as the runner makes it, `history` its prompt; no vocab: no grammar, DRY breakers none."""
    return Sampler(replace(params, dry_sequence_breakers=()), None, n_vocab, list(history))


def survivors(params: SamplingParams, logits: list[float], history: tuple[int, ...] = ()) -> dict[int, float]:
    chosen = sampler(params, len(logits), history)
    try:
        return Candidates(logits).through(chosen).survivors
    finally:
        chosen.free()


def stage_names(params: SamplingParams) -> list[str]:
    """The chain's stages by llama.cpp's names, the worker's draw last as "draw" (its name callback is Python's, which
    ctypes cannot hand llama.cpp without leaking: only llama.cpp's own are asked)."""
    chain = build_chain(replace(params, dry_sequence_breakers=()), None, 8, seed=1)  # no vocab: no breakers
    try:
        native = [llama_cpp.llama_sampler_name(llama_cpp.llama_sampler_chain_get(chain.native, i)).decode()
                  for i in range(llama_cpp.llama_sampler_chain_n(chain.native) - (chain.draw is not None))]
        return native + ["draw"] * (chain.draw is not None)
    finally:
        llama_cpp.llama_sampler_free(chain.native)


def logits_of(probabilities: list[float]) -> list[float]:
    return [math.log(p) for p in probabilities]


SEEDED = SamplingParams(seed=1)


def test_the_stages_are_the_names_requests_use():
    assert set(STAGES) == set(SAMPLER_LETTERS) and SamplingParams().samplers == DEFAULT_SAMPLERS


def test_the_neutral_chain_is_the_draw_alone_and_greedy_the_top_token_alone():
    assert stage_names(SEEDED) == ["draw"]
    assert stage_names(replace(SEEDED, temperature=0)) == ["greedy"]


def test_greedy_keeps_only_the_repeat_stages_whatever_the_others_say():
    dice = replace(SEEDED, temperature=0, xtc_probability=1.0, xtc_threshold=0.05, top_n_sigma=0.1,
                   dynatemp_range=1.0, top_k=1, mirostat=2)
    assert stage_names(dice) == ["greedy"]
    assert stage_names(replace(dice, repeat_penalty=1.3, dry_multiplier=0.8)) == ["penalties", "dry", "greedy"]
    peaked = [0.1, 3.0, 2.9, 0.5, 2.95, 0.0, 1.0, 0.2]
    chosen = sampler(dice, len(peaked))
    try:
        assert Candidates(peaked).through(chosen).drawn == 1
    finally:
        chosen.free()


@pytest.mark.parametrize("n", [0.5, 1.0, 2.0])
def test_top_n_sigma_keeps_exactly_the_tokens_within_n_sigma_of_the_top(n):
    logits = [8.0, 7.5, 6.0, 3.0, 2.0, 1.0, 0.0, -1.0, -4.0]
    spread = float(np.std(logits))  # llama.cpp's: over every finite logit, by their count
    floor = max(logits) - n * spread
    assert min(abs(logit - floor) for logit in logits) > 1e-3  # no logit sits on the line: float32 cannot tip it
    kept = set(survivors(replace(SEEDED, top_n_sigma=n), logits))
    assert kept == {token for token, logit in enumerate(logits) if logit >= floor}
    assert 1 < len(kept) < len(logits)


def test_top_n_sigma_at_zero_or_below_is_no_stage():
    assert stage_names(replace(SEEDED, top_n_sigma=0.0)) == stage_names(replace(SEEDED, top_n_sigma=-1.0)) == [
        "draw"]


@pytest.mark.parametrize("threshold, kept", [(0.1, {3, 4, 5}), (0.2, {1, 2, 3, 4, 5}), (0.6, {0, 1, 2, 3, 4, 5})])
def test_xtc_at_probability_one_removes_the_tokens_above_threshold_but_the_least_likely_of_them(threshold, kept):
    logits = logits_of([0.4, 0.25, 0.15, 0.12, 0.05, 0.03])
    assert set(survivors(replace(SEEDED, xtc_probability=1.0, xtc_threshold=threshold), logits)) == kept


def test_xtc_keeps_min_keep_tokens():
    logits = logits_of([0.4, 0.25, 0.15, 0.12, 0.05, 0.03])
    xtc = replace(SEEDED, xtc_probability=1.0, xtc_threshold=0.1)
    assert len(survivors(replace(xtc, min_keep=3), logits)) == 3  # three would be left: enough
    assert len(survivors(replace(xtc, min_keep=4), logits)) == 6  # fewer than four would be left: none go


def _xtc_rolls(seed: int, steps: int = 40) -> list[bool]:
    """Whether XTC (probability 0.5) dropped tokens at each of `steps` steps of one sequence seeded `seed`."""
    logits = logits_of([0.4, 0.25, 0.15, 0.12, 0.05, 0.03])
    chosen = sampler(replace(SEEDED, xtc_probability=0.5, xtc_threshold=0.1, seed=seed), len(logits))
    try:
        return [len(Candidates(logits).through(chosen).survivors) < len(logits) for _ in range(steps)]
    finally:
        chosen.free()


def test_xtc_rolls_its_dice_from_the_request_seed():
    rolls = _xtc_rolls(5)
    assert 0 < sum(rolls) < len(rolls)
    assert _xtc_rolls(5) == rolls
    assert _xtc_rolls(5 + 2**32) != rolls  # every bit of the 64-bit seed counts


def test_dry_penalizes_the_token_that_would_extend_a_repeated_sequence():
    # The history ends with 1 2 3, which came before followed by 4: 4 would extend a repeat of three tokens, one
    # past the allowed two, and loses multiplier * base ^ (3 - 2).
    history = (5, 1, 2, 3, 4, 6, 1, 2, 3)
    dry = replace(SEEDED, dry_multiplier=0.8, dry_base=2.0, dry_allowed_length=2, dry_penalty_last_n=64)
    logits = [0.0] * 8
    assert survivors(dry, logits, history) == {**dict.fromkeys(range(8), 0.0), 4: pytest.approx(-1.6)}
    longer = (1, 2, 3, 4, 4, 4, 5, 1, 2, 3, 4, 4)  # 1 2 3 4 4 came before followed by 4: five, one more per token
    assert survivors(dry, logits, longer)[4] == pytest.approx(-0.8 * 2.0 ** 3)
    assert survivors(dry, logits, (1, 2, 3, 4, 5, 6, 7)) == dict.fromkeys(range(8), 0.0)  # nothing repeats
    assert survivors(replace(dry, dry_penalty_last_n=4), logits, history) == dict.fromkeys(range(8), 0.0)


def _mirostat_draws(version: int, tau: float, seed: int = 7, steps: int = 300) -> list[int]:
    logits = [-1.1 * math.log(rank) for rank in range(1, 201)]  # Zipf-like: token 0 most likely
    chosen = sampler(replace(SEEDED, mirostat=version, mirostat_tau=tau, mirostat_eta=0.1, seed=seed), len(logits))
    try:
        return [Candidates(logits).through(chosen).drawn for _ in range(steps)]
    finally:
        chosen.free()


@pytest.mark.parametrize("version, name", [(1, "mirostat"), (2, "mirostat-v2")])
def test_mirostat_draws_for_itself_at_the_surprise_tau_asks(version, name):
    assert stage_names(replace(SEEDED, mirostat=version)) == [name]  # temperature 1: no temperature stage
    assert stage_names(replace(SEEDED, mirostat=version, temperature=0.7, top_k=5)) == ["temp", name]
    logits = np.array([-1.1 * math.log(rank) for rank in range(1, 201)])
    surprise = -np.log2(np.exp(logits) / np.exp(logits).sum())  # bits, of each token drawn from the whole list
    low, high = _mirostat_draws(version, 1.0), _mirostat_draws(version, 6.0)
    assert low == _mirostat_draws(version, 1.0)  # seeded: the same draws again
    assert _mirostat_draws(version, 1.0, seed=7 + 2**32) != low
    assert surprise[low].mean() < surprise[high].mean() and len(set(low)) < len(set(high))


def _dynamic_temperature(logits: list[float], low: float, high: float, exponent: float) -> float:
    """llama_sampler_temp_ext's temperature: from low to high as the candidates' entropy goes from none to most."""
    p = np.exp(np.array(logits) - max(logits))
    p /= p.sum()
    entropy = -(p * np.log(p)).sum()
    return low + (high - low) * (entropy / math.log(len(logits))) ** exponent


@pytest.mark.parametrize("logits, widens", [
    ([6.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], True),  # one likely token: low entropy, cooler, the gaps grow
    ([1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3], False),  # nearly flat: high entropy, hotter, the gaps shrink
])
def test_dynamic_temperature_scales_the_logits_by_their_entropy(logits, widens):
    params = replace(SEEDED, temperature=1.0, dynatemp_range=0.5, dynatemp_exponent=1.0)
    temperature = _dynamic_temperature(logits, 0.5, 1.5, 1.0)
    scaled = survivors(params, logits)
    assert scaled == {token: pytest.approx(logit / temperature, rel=1e-4) for token, logit in enumerate(logits)}
    assert (temperature < 1) == widens


def test_the_samplers_order_decides_which_tokens_survive():
    logits = logits_of([0.3, 0.25, 0.2, 0.15, 0.1])
    narrow = replace(SEEDED, top_k=2, top_p=0.5)
    # top-k first: 0.3 and 0.25 left, renormalized to 0.55 and 0.45; top-p 0.5 then keeps the first.
    assert set(survivors(replace(narrow, samplers=("top_k", "top_p")), logits)) == {0}
    # top-p first: 0.3 + 0.25 reach 0.5; top-k 2 keeps both.
    assert set(survivors(replace(narrow, samplers=("top_p", "top_k")), logits)) == {0, 1}
    # A stage left out of the order is not run, whatever its setting.
    assert set(survivors(replace(narrow, samplers=("top_p",)), logits)) == {0, 1}
    assert set(survivors(replace(narrow, samplers=()), logits)) == {0, 1, 2, 3, 4}


def test_native_seeds_are_32_bits_never_llama_cpps_random_and_move_with_every_bit():
    seeds = [0, 1, 5, 2**32 - 1, 2**32, 5 + 2**32, 2**63, 2**64 - 1]
    natives = [native_seed(seed) for seed in seeds]
    assert natives == [native_seed(seed) for seed in seeds]
    assert all(0 <= native < NATIVE_RANDOM for native in natives) and len(set(natives)) == len(seeds)
