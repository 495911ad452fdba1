"""A chain of llama.cpp's greedy stage, alone or after a logit bias, read straight from the logits row: its token is
the first of the largest biased logits (llama_sampler_greedy_apply keeps the first of equals), which numpy's argmax
finds, and the order in which a grammar checks the most likely tokens (constraints/grammar.py). The bias is added as
llama.cpp's logit-bias stage adds it, in float32. Without a grammar the chain itself samples: read this way instead,
one stream's step was slower (bench/probes/RESULTS.md, "Sampling under a JSON schema, part by part")."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp
import numpy as np

from worker.engine.native.gil_kept import gil_kept


def logits_row(ctx: llama_cpp.llama_context_p, row: int, n_vocab: int) -> np.ndarray:
    """Row `row` of the last llama_decode's logits, read in place (valid until the next decode); the lookup keeps the
    GIL (native/gil_kept.py)."""
    lookup = gil_kept("llama_get_logits_ith", (ctypes.c_void_p, ctypes.c_int32), ctypes.POINTER(ctypes.c_float))
    return np.ctypeslib.as_array(lookup(ctx, row), shape=(n_vocab,))


@dataclass(frozen=True)
class Greedy:
    """The greedy stage after a logit bias (none: greedy alone)."""

    tokens: np.ndarray  # the biased tokens
    biases: np.ndarray  # float32, as llama_logit_bias holds them

    @classmethod
    def with_bias(cls, logit_bias: dict[int, float]) -> Greedy:
        return cls(np.fromiter(logit_bias, dtype=np.int64, count=len(logit_bias)),
                   np.fromiter(logit_bias.values(), dtype=np.float32, count=len(logit_bias)))

    def biased(self, logits: np.ndarray) -> np.ndarray:
        """The logits as the greedy stage sees them: a copy with the biases added, or the row itself without any."""
        if not len(self.tokens):
            return logits
        biased = logits.copy()
        biased[self.tokens] += self.biases  # a request's biases name each token once
        return biased
