"""A request's SamplingParams as a native llama.cpp sampler chain, and its grammar beside it, not a stage of the chain
(constraints/grammar.py; constraints/lazy_grammar.py for one that waits for its trigger)."""

from __future__ import annotations

import llama_cpp
import structlog

from worker.engine.constraints.grammar import GrammarSampler
from worker.engine.constraints.lazy_grammar import LazyGrammar
from worker.engine.output.seeded_draw import SeededDraw, random_seed
from worker.engine.requests import SamplingParams

log = structlog.get_logger(__name__)


def build_chain(params: SamplingParams, n_vocab: int,
                draw: SeededDraw | None) -> tuple[llama_cpp.llama_sampler_p, bool]:
    """The chain, and whether it has a penalty stage (which must first see the prompt). Stages in llama.cpp's own
    default order (common/sampling.cpp): logit bias, penalties, top-k, typical, top-p, min-p, temperature, then the
    random draw (output/seeded_draw.py). Neutral settings leave their stage out, so greedy stays exactly greedy.

    `draw` ends the chain unless the request is greedy; the chain frees its native stage."""
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
    if params.typical_p < 1.0:
        add(llama_cpp.llama_sampler_init_typical(params.typical_p, 1))
    if params.top_p < 1.0:
        add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
    add(llama_cpp.llama_sampler_init_temp(params.temperature))
    assert draw is not None  # Sampler gives every sampled (temperature > 0) request its draw
    add(draw.sampler)
    return chain, penalized


class Sampler:
    """One sequence's sampling: its chain, and its grammar when the request has one.

    Built on the engine thread when the sequence is admitted; `free` when it leaves its slot.
    """

    def __init__(self, params: SamplingParams, vocab: llama_cpp.llama_vocab_p, n_vocab: int,
                 prompt: list[int], preserved: frozenset[int] = frozenset()) -> None:
        # Kept here: the draw's Python callback must live as long as the chain that calls it.
        seed = random_seed() if params.seed is None else params.seed
        self._draw = SeededDraw(seed) if params.temperature > 0 else None
        self.chain, penalized = build_chain(params, n_vocab, self._draw)
        if penalized:  # penalties look back over the prompt too, as llama-server's do
            for token in prompt[-params.repeat_last_n:]:
                llama_cpp.llama_sampler_accept(self.chain, token)
        self.grammar = _grammar(params, vocab, n_vocab, preserved)
        # The grammar describes the whole output, reasoning included, from the template's opening of the answer:
        # it first takes that opening, as llama.cpp's chat layer means it.
        self._whole = params.grammar_prefill is not None and isinstance(self.grammar, GrammarSampler)
        if self._whole and not self.take(list(params.grammar_prefill or ())):
            log.warning("grammar_dropped", why="it refuses the chat template's opening of the answer")
            self._drop_grammar()

    def sample(self, ctx: llama_cpp.llama_context_p, row: int, reasoning: bool = False) -> int | None:
        """The next token from logits row `row`; None when the grammar allows no token at all.

        `reasoning`: a thinking model's reasoning is being sampled, which a grammar of the answer neither restricts
        nor sees (a grammar of the whole output does)."""
        if self.grammar is None:
            return llama_cpp.llama_sampler_sample(self.chain, ctx, row)
        return self.grammar.sample(self.chain, ctx, row, constrained=self._whole or not reasoning)

    def accept(self, token: int) -> None:
        """A token the engine wrote instead of sampling (the end of thinking): the penalties see it too, and a
        grammar of the whole output."""
        llama_cpp.llama_sampler_accept(self.chain, token)
        if self._whole and not self.take([token]):
            log.warning("grammar_dropped", why="it refuses the end of thinking a spent budget wrote")
            self._drop_grammar()

    def take(self, tokens: list[int]) -> bool:
        assert isinstance(self.grammar, GrammarSampler)
        return self.grammar.take(tokens)

    def _drop_grammar(self) -> None:
        assert self.grammar is not None
        self.grammar.free()
        self.grammar, self._whole = None, False

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.chain)
        if self.grammar is not None:
            self.grammar.free()


def _grammar(params: SamplingParams, vocab: llama_cpp.llama_vocab_p, n_vocab: int,
             preserved: frozenset[int]) -> GrammarSampler | LazyGrammar | None:
    if not params.grammar:
        return None
    if not params.grammar_triggers:
        return GrammarSampler(vocab, params.grammar, n_vocab)
    return LazyGrammar(vocab, params.grammar, n_vocab, params.grammar_triggers, preserved)
