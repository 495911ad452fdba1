"""GBNF grammars in llama.cpp: why one does not parse, and sampling under one as llama.cpp's common sampler does:
the chain draws first and the grammar checks just that token (docs/benchmarks.md, "Structured output")."""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import llama_cpp
import numpy as np

from worker.engine.native import llama_log
from worker.engine.native.greedy import Greedy, logits_row

ROOT = b"root"
# llama.cpp's parser writes why a grammar does not parse to stderr (not to its log), then the whole grammar.
_PARSE_ERROR = "error parsing grammar: "
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


@contextmanager
def _stderr_into(sink: IO[bytes]) -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def grammar_problem(vocab: llama_cpp.llama_vocab_p, text: str) -> str | None:
    """Why llama.cpp refuses `text` as a grammar (its own words), or None when it parses.

    Whatever else reached stderr during the call (another thread's log lines) is written back after it;
    only llama.cpp's parse error and the grammar it echoes are kept out of the log.
    """
    llama_log.recent_errors.clear()
    with tempfile.TemporaryFile() as sink:
        with _stderr_into(sink):
            sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), ROOT)
        sink.seek(0)
        captured = sink.read().decode("utf-8", errors="replace")
    others, found, reason = captured.partition(_PARSE_ERROR)
    if found:
        others = others.rpartition("\n")[0]  # up to llama.cpp's "<function>: error parsing grammar: ..." line
    if others.strip():
        sys.stderr.write(others.rstrip("\n") + "\n")
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
        return None
    if found:
        return reason.split("\n", 1)[0].strip()
    return llama_log.last_error("llama.cpp could not build a sampler from it")


# A greedy chain's token refused by the grammar: the next most likely tokens are checked RANKED at a time, up to
# RANKED_ROUNDS times, then the TOP most likely in one call, before the grammar masks the whole vocabulary
# (bench/probes/grammarcost.py: under a JSON schema the token the grammar allows is mostly among the first few, now
# and then a few hundred down; masking 49k tokens costs ~7 ms, ranking the TOP ~0.3 ms).
RANKED, RANKED_ROUNDS, TOP = 8, 4, 512


class GrammarSampler:
    """One sequence's grammar, and the candidate buffer it masks when the chain's first draw is refused.

    Not a stage of the sequence's chain: masking every candidate each token costs more than the draw (a 49k vocab),
    so, as common_sampler_sample does, the chain draws first and the grammar checks that token; only when it is
    refused does the grammar mask the whole vocabulary and the chain draw again. Greedy still takes the most likely
    token the grammar allows.

    `greedy`: the chain is llama.cpp's greedy stage, alone or after a logit bias, whose token is the first of the
    largest biased logits (native/greedy.py). Then no candidate buffer is filled for the first draw (the biased
    logits' argmax is that token), and a refused one is followed by the next most likely tokens, in the greedy
    stage's order (logit, then token id), checked a few at a time, then the TOP in one call: the first the grammar
    allows is the token masking the whole vocabulary would give, at a fraction of its cost.
    """

    def __init__(self, vocab: llama_cpp.llama_vocab_p, text: str, n_vocab: int, greedy: Greedy | None = None) -> None:
        # The API checked the text with grammar_problem before queueing the request.
        self.grammar = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), ROOT)
        self._n_vocab = n_vocab
        self._greedy = greedy
        self._data = (llama_cpp.llama_token_data * n_vocab)()
        self._view = np.frombuffer(self._data, dtype=_TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._all = llama_cpp.llama_token_data_array(self._data, n_vocab, -1, False)
        self._few_data = (llama_cpp.llama_token_data * RANKED)()
        self._few = llama_cpp.llama_token_data_array(self._few_data, 1, -1, False)

    def _logits(self, ctx: llama_cpp.llama_context_p, row: int) -> np.ndarray:
        return logits_row(ctx, row, self._n_vocab)

    def _fill(self, ctx: llama_cpp.llama_context_p, row: int) -> None:
        """Every token with its raw logit, as llama_sampler_sample starts."""
        view = self._view
        view["id"], view["logit"], view["p"] = self._ids, self._logits(ctx, row), 0.0
        # XTC moves the array's start past the tokens it drops: back to the buffer's first token.
        self._all.data = ctypes.cast(self._data, llama_cpp.llama_token_data_p)
        self._all.size, self._all.selected, self._all.sorted = self._n_vocab, -1, False

    def _allows(self, token: int) -> bool:
        return self._first_allowed([token]) is not None

    def _first_allowed(self, tokens: list[int]) -> int | None:
        """The first of `tokens` (at most RANKED) the grammar allows next, None when it refuses them all."""
        for i, token in enumerate(tokens):
            self._few_data[i].id, self._few_data[i].logit, self._few_data[i].p = token, 1.0, 0.0
        self._few.size, self._few.selected, self._few.sorted = len(tokens), -1, False
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._few))
        return next((tokens[i] for i in range(len(tokens)) if self._few_data[i].logit != -np.inf), None)

    def take(self, tokens: list[int]) -> bool:
        """Feed the grammar tokens already written (a lazy grammar's replay), each checked before it is accepted:
        accepting one it refuses would abort inside llama.cpp. False at the first refused; the grammar is then spent."""
        for token in tokens:
            if not self._allows(token):
                return False
            llama_cpp.llama_sampler_accept(self.grammar, token)
        return True

    def sample(self, chain: llama_cpp.llama_sampler_p, ctx: llama_cpp.llama_context_p, row: int,
               constrained: bool = True) -> int | None:
        """The next token under the grammar, accepted by grammar and chain; None when the grammar allows none.

        `constrained` False: the grammar neither restricts nor sees this token (a thinking model's reasoning)."""
        if not constrained:
            return llama_cpp.llama_sampler_sample(chain, ctx, row)
        greedy = self._greedy
        token = self._drawn(chain, ctx, row) if greedy is None else self._best_allowed(greedy, chain, ctx, row)
        if token is None:
            return None
        llama_cpp.llama_sampler_accept(self.grammar, token)
        llama_cpp.llama_sampler_accept(chain, token)
        return token

    def _drawn(self, chain: llama_cpp.llama_sampler_p, ctx: llama_cpp.llama_context_p, row: int) -> int | None:
        """The chain's draw, drawn again from what the grammar allows where it refuses the first."""
        self._fill(ctx, row)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(self._all))
        token = self._all.data[self._all.selected].id
        return token if self._allows(token) else self._masked_draw(chain, ctx, row)

    def _best_allowed(self, greedy: Greedy, chain: llama_cpp.llama_sampler_p, ctx: llama_cpp.llama_context_p,
                      row: int) -> int | None:
        """A greedy chain's token under the grammar: the most likely tokens first, the whole vocabulary masked last
        (as it is wherever the ranking reaches a token a bias banned: what the mask then gives is the chain's)."""
        logits = greedy.biased(self._logits(ctx, row))
        token = int(np.argmax(logits))  # the first of the largest, as the greedy stage picks
        if self._allows(token):
            return token
        left = logits.copy()
        left[token] = -np.inf
        for _ in range(RANKED_ROUNDS):
            ranked = []
            for _ in range(RANKED):
                ranked.append(token := int(np.argmax(left)))
                left[token] = -np.inf
            if logits[ranked[-1]] == -np.inf:
                break
            if (allowed := self._first_allowed(ranked)) is not None:
                return allowed
        else:
            if (allowed := self._first_allowed_of_top(logits, min(TOP, self._n_vocab))) is not None:
                return allowed
        return self._masked_draw(chain, ctx, row)

    def _first_allowed_of_top(self, logits: np.ndarray, count: int) -> int | None:
        """The first token the grammar allows of the `count` most likely (and those tied with the last of them), in
        the greedy stage's order: by logit, ties by id. One grammar call over them all, in the candidate buffer."""
        threshold = np.partition(logits, -count)[-count]
        if threshold == -np.inf:
            return None
        ids = np.flatnonzero(logits >= threshold)
        ranked = ids[np.argsort(-logits[ids], kind="stable")]  # stable: tied ones stay in id order
        view = self._view[:len(ranked)]
        view["id"], view["logit"], view["p"] = ranked, 0.0, 0.0
        self._all.data = ctypes.cast(self._data, llama_cpp.llama_token_data_p)
        self._all.size, self._all.selected, self._all.sorted = len(ranked), -1, False
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._all))
        allowed = np.flatnonzero(view["logit"] == 0.0)
        return int(ranked[allowed[0]]) if len(allowed) else None

    def _masked_draw(self, chain: llama_cpp.llama_sampler_p, ctx: llama_cpp.llama_context_p, row: int) -> int | None:
        """The chain's draw from every token the grammar allows; None where it allows none."""
        self._fill(ctx, row)
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._all))
        if not np.isfinite(self._view["logit"]).any():
            return None  # every token is masked: drawing or accepting one would abort inside llama.cpp
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(self._all))
        return self._all.data[self._all.selected].id

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.grammar)
