"""Log probabilities of a sampled token and its best alternatives, from the model's raw logits: the model's own
distribution (log-softmax over the whole vocabulary, as OpenAI and llama-server report), not the sampler chain's."""

from __future__ import annotations

from collections.abc import Callable

import llama_cpp
import numpy as np

from worker.engine.requests import Alternative, TokenLogprob


class LogprobReader:
    def __init__(self, ctx: llama_cpp.llama_context_p, n_vocab: int, piece: Callable[[int], bytes]) -> None:
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._piece = piece  # token -> bytes

    def _row(self, row: int) -> np.ndarray:
        """Logits row `row` of the last llama_decode call (a view of llama.cpp's buffer: read it before the next)."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, row), shape=(self._n_vocab,))

    def logits(self, row: int, tokens: tuple[int, ...]) -> tuple[float, ...]:
        """The raw logits of `tokens` in row `row`: a rerank's yes and no (pooling/rerank.py)."""
        logits = self._row(row)
        return tuple(float(logits[token]) for token in tokens)

    def read(self, row: int, token: int, n_top: int) -> TokenLogprob:
        """The entry for `token`, sampled from logits row `row` of the last llama_decode call."""
        logits = self._row(row)
        peak = float(logits.max())
        log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
        top: tuple[Alternative, ...] = ()
        if n_top > 0:
            best = np.argpartition(logits, -n_top)[-n_top:]
            best = best[np.lexsort((best, -logits[best]))]  # ties by token id, as the greedy sampler breaks them
            top = tuple(Alternative(self._piece(int(t)), float(logits[t]) - log_total) for t in best)
        return TokenLogprob(self._piece(token), float(logits[token]) - log_total, top)
