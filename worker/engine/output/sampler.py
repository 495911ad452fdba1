"""A request's SamplingParams as a native llama.cpp sampler chain, built as common_sampler_init builds llama-server's
(common/sampling.cpp), and its grammar beside it, not a stage of the chain (constraints/grammar.py;
constraints/lazy_grammar.py for one that waits for its trigger)."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp
import structlog

from worker.engine.constraints.grammar import GrammarSampler
from worker.engine.constraints.lazy_grammar import LazyGrammar
from worker.engine.native.greedy import Greedy
from worker.engine.output.seeded_draw import SeededDraw, native_seed, random_seed
from worker.engine.output.stages import MIROSTATS, REPEAT_STAGES, STAGES, StageContext, lookback
from worker.engine.requests import SamplingParams

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Chain:
    native: llama_cpp.llama_sampler_p  # frees its stages, the draw's native side included
    lookback: int  # the prompt's last tokens its stages must see before the first sample (penalties, DRY)
    draw: SeededDraw | None  # held here: its Python callback must live as long as the native chain that calls it
    greedy: Greedy | None  # the chain as greedy over biased logits, where it is just that (a grammar ranks by it)


def build_chain(params: SamplingParams, vocab: llama_cpp.llama_vocab_p | None, n_vocab: int, seed: int) -> Chain:
    """The chain, in llama.cpp's order: logit bias, then `samplers`' stages in their order, then the draw: the
    worker's own 64-bit seeded draw (output/seeded_draw.py) where llama.cpp would use its dist stage. Mirostat (1 or
    2) replaces the samplers and the draw with temperature, then Mirostat's own draw. Greedy (temperature <= 0) keeps
    only the stages that move a logit by what came before (penalties, DRY), then takes the top token, whatever the
    other settings say. Neutral settings leave their stage out, so greedy stays exactly greedy.

    Mirostat and XTC, llama.cpp's stages that roll dice, take a 32-bit seed made from `seed` (native_seed)."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = lambda stage: llama_cpp.llama_sampler_chain_add(chain, stage)  # noqa: E731
    context = StageContext(vocab, n_vocab, native_seed(seed))

    if params.logit_bias:
        biases = (llama_cpp.llama_logit_bias * len(params.logit_bias))(
            *(llama_cpp.llama_logit_bias(token, bias) for token, bias in params.logit_bias.items())
        )
        add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(params.logit_bias), biases))
    draw = None
    if params.temperature <= 0:
        names = tuple(name for name in params.samplers if name in REPEAT_STAGES)
        last = llama_cpp.llama_sampler_init_greedy()
    elif params.mirostat:
        names = ()
        if params.temperature != 1:  # llama.cpp's plain temperature here: no dynamic range under Mirostat
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
        last = MIROSTATS[params.mirostat](params, context)
    else:
        names = params.samplers
        draw = SeededDraw(seed)
        last = draw.sampler
    built = []
    for name in names:
        stage = STAGES[name](params, context)
        if stage is not None:
            add(stage)
            built.append(name)
    add(last)
    greedy = Greedy.with_bias(params.logit_bias) if params.temperature <= 0 and not built else None
    return Chain(chain, lookback(params, tuple(built)), draw, greedy)


class Sampler:
    """One sequence's sampling: its chain, and its grammar when the request has one.

    Built on the engine thread when the sequence is admitted; `free` when it leaves its slot.
    """

    def __init__(self, params: SamplingParams, vocab: llama_cpp.llama_vocab_p, n_vocab: int,
                 prompt: list[int], preserved: frozenset[int] = frozenset()) -> None:
        self._chain = build_chain(params, vocab, n_vocab, random_seed() if params.seed is None else params.seed)
        self.chain = self._chain.native
        if self._chain.lookback:  # penalties and DRY look back over the prompt too, as llama-server's do
            for token in prompt[-self._chain.lookback:]:
                llama_cpp.llama_sampler_accept(self.chain, token)
        self.grammar = _grammar(params, vocab, n_vocab, preserved, self._chain.greedy)
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

    @property
    def reads_phase(self) -> bool:
        """Whether sample() draws otherwise inside a thinking model's reasoning: a grammar of the answer only."""
        return self.grammar is not None and not self._whole

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


def _grammar(params: SamplingParams, vocab: llama_cpp.llama_vocab_p, n_vocab: int, preserved: frozenset[int],
             greedy: Greedy | None) -> GrammarSampler | LazyGrammar | None:
    if not params.grammar:
        return None
    if not params.grammar_triggers:
        return GrammarSampler(vocab, params.grammar, n_vocab, greedy)
    return LazyGrammar(vocab, params.grammar, n_vocab, params.grammar_triggers, preserved, greedy)
