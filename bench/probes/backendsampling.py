"""Probe: greedy sampling inside llama.cpp's graph (`llama_set_sampler`, the "backend sampler chain"; llama-server's
`--backend-sampling`) against the worker's host sampling (`llama_sampler_sample` on the logits row), on the CPU
backend, one stream: whether every token is the same, and what a step costs each way.

One context, made as the worker makes it (exact mode's kernels), one slot. Host: a greedy chain sampled from the
row's logits after each llama_decode. Graph: the same chain attached to the slot's sequence (`llama_set_sampler`:
the next llama_decode reserves the scheduler's graph again, and a chain can be attached once in its life, so a chain
would be attached per slot, not per request), its token read with `llama_get_sampled_token_ith`. Each round
prefills PROMPT and decodes TOKENS tokens (end of generation banned in both chains), the two ways alternated, medians
of ROUNDS; a step is llama_decode plus the sample. Also said: whether the logits row is still there to read with the
chain attached (llama.cpp copies it out only for rows of sequences without one), and the outputs a sequence may
have under a chain (`n_outputs_max_per_seq`: drafts and scored prompts need more than one).
Run: .venv/bin/python bench/probes/backendsampling.py [MODEL.gguf]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from bench.prompts import PromptFactory

TOKENS, ROUNDS = 256, 5
PROMPT = "Write a long story about a lighthouse keeper and the ships she watched over the years."


def main() -> None:
    path = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    from worker.engine.host import EngineConfig, choose_library, load_library

    config = EngineConfig(parallel=1, ctx_size=2048)
    load_library(choose_library(path, config))
    import llama_cpp as L

    from worker.engine.native.model import LlamaModel

    model = LlamaModel(path, config)
    ctx, n_vocab = model.ctx, model.n_vocab
    no_eos = PromptFactory(path).end_of_generation
    prompt = model.tokenize(PROMPT)
    batch = L.llama_batch_init(max(len(prompt), 1), 0, 1)

    def chain() -> L.llama_sampler_p:
        sampler = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        biases = (L.llama_logit_bias * len(no_eos))(*(L.llama_logit_bias(t, float("-inf")) for t in no_eos))
        L.llama_sampler_chain_add(sampler, L.llama_sampler_init_logit_bias(n_vocab, len(no_eos), biases))
        L.llama_sampler_chain_add(sampler, L.llama_sampler_init_greedy())
        return sampler

    def decode(tokens: list[int], start: int) -> None:
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        assert L.llama_decode(ctx, batch) == 0

    def run(draw) -> tuple[list[int], list[float]]:
        L.llama_memory_seq_rm(model.memory, 0, -1, -1)
        decode(prompt, 0)
        tokens, steps = [draw()], []
        for n in range(TOKENS - 1):
            started = time.perf_counter()
            decode([tokens[-1]], len(prompt) + n)
            tokens.append(draw())
            steps.append(time.perf_counter() - started)
        return tokens, steps

    host_chain = chain()
    host = lambda: L.llama_sampler_sample(host_chain, ctx, -1)  # noqa: E731
    graph = lambda: L.llama_get_sampled_token_ith(ctx, -1)  # noqa: E731
    times: dict[str, list[float]] = {"host": [], "graph": []}
    texts: dict[str, list[int]] = {}
    logits_with_chain = None
    for _ in range(ROUNDS):
        for name, draw in (("host", host), ("graph", graph)):
            # A chain is attached once in its life (llama.cpp asserts it): each round attaches a new one.
            attached = chain() if name == "graph" else None
            assert L.llama_set_sampler(ctx, 0, attached)
            run(draw)  # a warm round: attaching or detaching a chain reserves the graph again
            tokens, steps = run(draw)
            times[name].append(statistics.median(steps) * 1e3)
            assert texts.setdefault(name, tokens) == tokens, f"{name}: another text on another round"
            if attached is not None:
                logits_with_chain = bool(L.llama_get_logits_ith(ctx, -1))
                assert L.llama_set_sampler(ctx, 0, None)
                L.llama_sampler_free(attached)
    print(f"{path.name}, one slot, {TOKENS} tokens greedy, {ROUNDS} rounds alternated; ms a step (median):")
    for name, values in times.items():
        print(f"  {name:>5}: {statistics.median(values):.3f}  (rounds: {', '.join(f'{v:.3f}' for v in values)})")
    same = sum(a == b for a, b in zip(texts["host"], texts["graph"]))
    print(f"  same tokens: {same} of {TOKENS}; logits row readable with the chain attached: {logits_with_chain}; "
          f"n_outputs_max_per_seq: {L.llama_context_default_params().n_outputs_max_per_seq}")
    L.llama_sampler_free(host_chain)
    L.llama_batch_free(batch)
    model.close()


if __name__ == "__main__":
    main()
