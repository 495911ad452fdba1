"""Probe: what sampling under a JSON schema's grammar costs a token, against sampling without one, by part.

One sequence on the worker's own LlamaModel (exact mode's kernels): bench/structured.py's prompt and 30-property
schema, the grammar the API would build from it (worker/schema_grammar.py), greedy as that bench samples. Each token
is decoded and then sampled by the worker's Sampler (worker/engine/output/sampler.py); the sample alone is timed,
and under the grammar how often the grammar refuses the first draw (_allows) and how often the whole vocabulary is
masked for a second draw (_masked_draw); GREEDY_ALONE=0 samples as a chain of more stages than greedy's would
(the candidate buffer filled, the chain applied, then the check) to compare. Without a grammar the same tokens are
sampled by llama_sampler_sample alone.
Run: .venv/bin/python bench/probes/grammarcost.py [MODEL.gguf]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from bench.structured import PROMPT, SCHEMA
from worker.engine.constraints.grammar import GrammarSampler
from worker.engine.host import EngineConfig
from worker.engine.native.model import LlamaModel
from worker.engine.output.sampler import Sampler
from worker.engine.requests import SamplingParams
from worker.schema_grammar import schema_grammar

TOKENS, ROUNDS = 300, 3


class Timed:
    """Wraps a callable, keeping each call's seconds and result."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call, self.seconds, self.results = call, [], []  # type: ignore[var-annotated]

    def __call__(self, *args: Any) -> Any:
        started = time.perf_counter()
        result = self.call(*args)
        self.seconds.append(time.perf_counter() - started)
        self.results.append(result)
        return result


def generate(model: LlamaModel, prompt: list[int], grammar: str | None) -> dict[str, float]:
    llama_cpp.llama_memory_clear(model.memory, True)
    batch = llama_cpp.llama_batch_init(len(prompt), 0, 1)
    for i, token in enumerate(prompt):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = token, i, 1, 0
        batch.logits[i] = i == len(prompt) - 1
    batch.n_tokens = len(prompt)
    assert llama_cpp.llama_decode(model.ctx, batch) == 0
    sampler = Sampler(SamplingParams(temperature=0.0, grammar=grammar), model.vocab, model.n_vocab, prompt)
    allows = masked = None
    if isinstance(sampler.grammar, GrammarSampler):
        if os.environ.get("GREEDY_ALONE", "1") != "1":
            sampler.grammar._greedy = None
        allows = sampler.grammar._allows = Timed(sampler.grammar._allows)  # type: ignore[method-assign]
        masked = sampler.grammar._masked_draw = Timed(sampler.grammar._masked_draw)  # type: ignore[method-assign]
    sample = Timed(sampler.sample)
    decode_s, row, pos, eog = [], len(prompt) - 1, len(prompt), False
    while len(sample.seconds) < TOKENS and not eog:
        token = sample(model.ctx, row)
        eog = token is None or llama_cpp.llama_vocab_is_eog(model.vocab, token)
        batch.token[0], batch.pos[0], batch.seq_id[0][0], batch.logits[0] = token or 0, pos, 0, True
        batch.n_tokens, row, pos = 1, 0, pos + 1
        started = time.perf_counter()
        assert llama_cpp.llama_decode(model.ctx, batch) == 0
        decode_s.append(time.perf_counter() - started)
    sampler.free()
    llama_cpp.llama_batch_free(batch)
    n = len(sample.seconds)
    figures = {"tokens": n, "decode ms": statistics.median(decode_s) * 1e3,
               "sample ms": sum(sample.seconds) / n * 1e3}
    if allows is not None and masked is not None:
        drawn_once = [s for s, allowed in zip(sample.seconds, allows.results) if allowed]
        figures |= {"refused share": allows.results.count(False) / n, "masked share": len(masked.seconds) / n,
                    "sample ms, first draw allowed": statistics.mean(drawn_once) * 1e3}
    return figures


def main() -> None:
    path = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    model = LlamaModel(path, EngineConfig(parallel=1, ctx_size=2048))
    text = PROMPT.format(n=1).encode()
    tokens = (llama_cpp.llama_token * 512)()
    count = llama_cpp.llama_tokenize(model.vocab, text, len(text), tokens, 512, True, False)
    prompt = list(tokens[:count])
    grammar = schema_grammar(SCHEMA)
    print(f"{path.name}, {model.kernels}; prompt {count} tokens, up to {TOKENS} generated, {ROUNDS} rounds")
    for name, rule in (("plain", None), ("json_schema", grammar)):
        runs = [generate(model, prompt, rule) for _ in range(ROUNDS)]
        medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(f"  {name:12s} " + ", ".join(f"{key} {value:.3g}" for key, value in medians.items()))
    model.close()


if __name__ == "__main__":
    main()
