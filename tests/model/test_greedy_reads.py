"""A greedy chain (llama.cpp's greedy stage, alone or after a logit bias) read from its logits (native/greedy.py)
takes the token llama.cpp's chain takes: the first of the largest biased logits. Under a grammar
(constraints/grammar.py), the most likely tokens first: the token masking the whole vocabulary gives (the first
largest logit among the tokens the grammar allows, ties to the lower id), on the test model's vocabulary and logits
made here: where the grammar allows the first draw, where the first token it allows is a few ranks down or tens of
ranks down (tied with refused tokens and another allowed one), and where none of the TOP is allowed, so the whole
vocabulary is masked as before."""
from __future__ import annotations

import ctypes
import math
from collections import Counter

import llama_cpp
import numpy as np
import pytest

from worker.engine import SamplingParams
from worker.engine.constraints.grammar import RANKED, RANKED_ROUNDS, TOP, GrammarSampler
from worker.engine.output.sampler import build_chain

GRAMMAR = "root ::= [0-9]+"  # at its start, a digit: the rest of the vocabulary is refused
STEPS = 40
PAST_RANKED = 1 + RANKED * RANKED_ROUNDS  # refused tokens enough to fill the ranks checked a few at a time


def token_of(vocab: llama_cpp.llama_vocab_p, text: str) -> int:
    buf = (llama_cpp.llama_token * 4)()
    assert llama_cpp.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, 4, False, False) == 1, text
    return buf[0]


def step_logits(rng: np.random.Generator, n_vocab: int, digits: list[int], case: str) -> np.ndarray:
    """Logits on six levels, so that ties are many, every digit low, and digits but the first (which the biased case
    bans) placed as `case` says."""
    logits = rng.integers(0, 6, n_vocab).astype(np.float32)
    logits[digits] = -1.0
    refused = rng.choice(np.setdiff1d(np.arange(n_vocab), digits), 2 * PAST_RANKED, replace=False)
    digits = digits[1:]
    if case == "first":  # a digit is the top token
        logits[rng.choice(digits)] = 10.0
    elif case == "ranked":  # three refused tokens first, then two digits tied with a refused one
        logits[refused[:3]] = 10.0
        logits[[refused[3], *rng.choice(digits, 2, replace=False)]] = 9.0
    elif case == "top":  # past the ranks checked a few at a time, within the TOP: two digits tied with refused ones
        logits[refused[:PAST_RANKED]] = 10.0
        logits[[*refused[PAST_RANKED:], *rng.choice(digits, 2, replace=False)]] = 9.5
    else:  # "masked": the best digit below the thousands of tokens at level 5, far past the ranks checked
        logits[rng.choice(digits)] = 4.5
    return logits


@pytest.fixture
def masked_draws(monkeypatch: pytest.MonkeyPatch) -> Counter[bool]:
    """How many times the whole vocabulary was masked, by whether the grammar ranked first (a greedy chain)."""
    counts: Counter[bool] = Counter()
    masked_draw = GrammarSampler._masked_draw

    def counted(grammar: GrammarSampler, *args: object) -> int | None:
        counts[grammar._greedy is not None] += 1
        return masked_draw(grammar, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(GrammarSampler, "_masked_draw", counted)
    return counts


@pytest.mark.parametrize("biased", [False, True], ids=["unbiased", "biased"])
@pytest.mark.parametrize("case", ["first", "ranked", "top", "masked"])
def test_a_greedy_chain_under_a_grammar_takes_the_token_masking_everything_gives(vocab, masked_draws, case, biased):
    """Biased: one digit banned (-inf) and a refused token lifted above the thousands at level 5 but below the
    case's own top tokens, through the chain's logit-bias stage in llama.cpp's way and the biased logits in ours."""
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    digits = [token_of(vocab, str(d)) for d in range(10)]
    bias = {digits[0]: -math.inf, token_of(vocab, "a"): 3.0} if biased else {}
    rng = np.random.default_rng(7)
    for step in range(STEPS):
        logits = step_logits(rng, n_vocab, digits, case)
        tokens = []
        for ranking in True, False:  # the ranked way, and llama.cpp's: fill, draw, mask, draw again
            chain = build_chain(SamplingParams(temperature=0.0, logit_bias=bias), vocab, n_vocab, seed=1)
            grammar = GrammarSampler(vocab, GRAMMAR, n_vocab, chain.greedy if ranking else None)
            grammar._logits = lambda _ctx, _row, logits=logits: logits  # type: ignore[method-assign]
            tokens.append(grammar.sample(chain.native, None, 0))  # type: ignore[arg-type]
            grammar.free()
            llama_cpp.llama_sampler_free(chain.native)
        assert tokens[0] == tokens[1] and tokens[0] in digits[1:], (case, step, tokens)
    ranked_masks = {"first": 0, "ranked": 0, "top": 0, "masked": STEPS}[case]
    assert masked_draws == Counter({True: ranked_masks, False: 0 if case == "first" else STEPS}) - Counter(), case
    assert TOP < n_vocab // 10  # "masked": the tokens at level 5 (a sixth) outnumber the ranks checked


def test_a_greedy_chain_is_read_as_the_first_of_its_largest_biased_logits():
    """native/greedy.py's argmax (a grammar's first check) is the chain's draw (its logit-bias stage, then greedy)
    over every candidate, on logits full of ties and biases that make more."""
    n_vocab, rng = 4096, np.random.default_rng(11)
    for trial in range(200):
        logits = rng.integers(0, 4, n_vocab).astype(np.float32) * np.float32(0.5)
        tokens = rng.choice(n_vocab, 6, replace=False)
        bias = {int(tokens[0]): -math.inf, int(tokens[1]): 0.5, int(tokens[2]): 1.0, int(tokens[3]): -0.5,
                int(tokens[4]): 1e-8, int(tokens[5]): 2.5}
        chain = build_chain(SamplingParams(temperature=0.0, logit_bias=bias), None, n_vocab, seed=1)
        assert chain.greedy is not None
        data = (llama_cpp.llama_token_data * n_vocab)(
            *(llama_cpp.llama_token_data(token, float(logit), 0.0) for token, logit in enumerate(logits)))
        candidates = llama_cpp.llama_token_data_array(data, n_vocab, -1, False)
        llama_cpp.llama_sampler_apply(chain.native, ctypes.byref(candidates))
        assert int(np.argmax(chain.greedy.biased(logits))) == data[candidates.selected].id, trial
        llama_cpp.llama_sampler_free(chain.native)


def test_only_a_chain_of_the_greedy_stage_after_a_bias_or_alone_is_read_as_its_argmax():
    def read(params: SamplingParams) -> bool:
        chain = build_chain(params, None, 8, seed=1)
        llama_cpp.llama_sampler_free(chain.native)
        return chain.greedy is not None

    assert read(SamplingParams(temperature=0.0)) and read(SamplingParams(temperature=0.0, top_k=5, top_p=0.5))
    assert read(SamplingParams(temperature=0.0, logit_bias={3: 2.0}))
    assert not read(SamplingParams(temperature=0.7))
    assert not read(SamplingParams(temperature=0.0, repeat_penalty=1.3))
