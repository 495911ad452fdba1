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


class GrammarSampler:
    """One sequence's grammar, and the candidate buffer it masks when the chain's first draw is refused.

    Not a stage of the sequence's chain: masking every candidate each token costs more than the draw (a 49k vocab),
    so, as common_sampler_sample does, the chain draws first and the grammar checks that token; only when it is
    refused does the grammar mask the whole vocabulary and the chain draw again. Greedy still takes the most likely
    token the grammar allows.
    """

    def __init__(self, vocab: llama_cpp.llama_vocab_p, text: str, n_vocab: int) -> None:
        # The API checked the text with grammar_problem before queueing the request.
        self.grammar = llama_cpp.llama_sampler_init_grammar(vocab, text.encode(), ROOT)
        self._n_vocab = n_vocab
        self._data = (llama_cpp.llama_token_data * n_vocab)()
        self._view = np.frombuffer(self._data, dtype=_TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._all = llama_cpp.llama_token_data_array(self._data, n_vocab, -1, False)
        self._one_data = (llama_cpp.llama_token_data * 1)()
        self._one = llama_cpp.llama_token_data_array(self._one_data, 1, -1, False)

    def _fill(self, ctx: llama_cpp.llama_context_p, row: int) -> None:
        """Every token with its raw logit, as llama_sampler_sample starts."""
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, row), shape=(self._n_vocab,))
        view = self._view
        view["id"], view["logit"], view["p"] = self._ids, logits, 0.0
        # XTC moves the array's start past the tokens it drops: back to the buffer's first token.
        self._all.data = ctypes.cast(self._data, llama_cpp.llama_token_data_p)
        self._all.size, self._all.selected, self._all.sorted = self._n_vocab, -1, False

    def _allows(self, token: int) -> bool:
        self._one_data[0].id, self._one_data[0].logit, self._one_data[0].p = token, 1.0, 0.0
        self._one.size, self._one.selected, self._one.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._one))
        return self._one_data[0].logit != -np.inf

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
        self._fill(ctx, row)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(self._all))
        token = self._all.data[self._all.selected].id
        if not self._allows(token):
            self._fill(ctx, row)
            llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._all))
            if not np.isfinite(self._view["logit"]).any():
                return None  # every token is masked: drawing or accepting one would abort inside llama.cpp
            llama_cpp.llama_sampler_apply(chain, ctypes.byref(self._all))
            token = self._all.data[self._all.selected].id
        llama_cpp.llama_sampler_accept(self.grammar, token)
        llama_cpp.llama_sampler_accept(chain, token)
        return token

    def free(self) -> None:
        llama_cpp.llama_sampler_free(self.grammar)
