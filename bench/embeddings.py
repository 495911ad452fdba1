#!/usr/bin/env python3
"""Embeddings: llm-worker (exact mode, and fast mode) vs llama-server --embeddings, on the same GGUF and inputs.

The two ways clients embed: an indexing job sends its inputs BATCH a request, back to back (one client);
a search front end sends single-input requests from CLIENTS clients at once. Inputs are short texts of 5 to ~60
tokens, each its own (a serial number leads), the same for every server. Reports inputs/s for each way, and the
least cosine between each server's vectors and llm-worker exact's for the same input (fast mode's is ~1.0: the same
work, packed otherwise; llama-server's is lower: with several slots it pools wrong vectors for inputs that share a
call, upstream's #26282, bench/probes/RESULTS.md), so it also runs with one slot, where its vectors are right: the
worker's ratios are to both. llama-server pools a model that names no pooling only when told: `--embeddings --pooling
mean`, the pooling the worker gives such a model. Exact mode puts each input of a decode on a 16-row boundary (its
vector the same batched or alone); fast mode packs them tight (docs/api.md, "Embeddings"): the two side by side are
what that promise costs. Rounds alternated (bench/rounds.py); figures are medians over the rounds.
Run: .venv/bin/python bench/run.py embeddings [--rounds 3] [--publish]   (bench/EMBEDDINGS.md)
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.client import new_session
from bench.config import LLAMA_SERVER, WORKER, BenchConfig, add_peer_flags, find_llama_server, find_model
from bench.report import environment, machine_line, write_report, write_summary
from bench.rounds import alternated, each_ratio, medians, round_ratios
from bench.servers import running_server

EXACT, FAST = "llm-worker exact", "llm-worker fast"
ONE_SLOT = "llama-server, one slot"
PEERS = (LLAMA_SERVER, ONE_SLOT)
# label: (server, llm-worker flags, slots where not --parallel's)
VARIANTS = {EXACT: (WORKER, (), None), FAST: (WORKER, ("--prefix-cache", "fast"), None),
            LLAMA_SERVER: (LLAMA_SERVER, (), None), ONE_SLOT: (LLAMA_SERVER, (), 1)}
KEYS = ("batched_inputs_s", "single_inputs_s")
WORDS = ("harbour", "pilot", "tide", "cargo", "lantern", "ledger", "crew", "berth", "anchor", "quay", "storm", "rope")
Vectors = dict[int, list[float]]


def texts(count: int) -> list[str]:
    """`count` distinct short texts, 1 to 48 words after their serial number: a search index's passages and queries."""
    return [f"{i}. " + " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(1 + (i * 13) % 48))
            for i in range(count)]


async def embed(url: str, inputs: list[str]) -> list[list[float]]:
    async with new_session() as session, session.post(url + "/v1/embeddings", json={"input": inputs}) as response:
        response.raise_for_status()
        data = (await response.json())["data"]
    return [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]


async def workload(url: str, inputs: list[str], args: argparse.Namespace) -> tuple[dict[str, float], Vectors]:
    """inputs/s batched (one client, BATCH inputs a request) and single (CLIENTS clients, one input a request)."""
    await embed(url, inputs[:args.batch])  # warm-up
    vectors: Vectors = {}
    started = time.perf_counter()
    for first in range(0, len(inputs), args.batch):
        for offset, vector in enumerate(await embed(url, inputs[first:first + args.batch])):
            vectors[first + offset] = vector
    batched = len(inputs) / (time.perf_counter() - started)
    queue = list(range(len(inputs)))

    async def client() -> None:
        while queue:
            index = queue.pop()
            vectors[index] = (await embed(url, [inputs[index]]))[0]

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(args.clients)))
    single = len(inputs) / (time.perf_counter() - started)
    return {"batched_inputs_s": batched, "single_inputs_s": single}, vectors


def min_cosine(a: Vectors, b: Vectors) -> float:
    return min(math.fsum(x * y for x, y in zip(a[i], b[i])) for i in a)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=4, ctx_size=8192, report="EMBEDDINGS.md")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--inputs", type=int, default=256)
    p.add_argument("--batch", type=int, default=32, help="inputs a request, batched")
    p.add_argument("--clients", type=int, default=4, help="clients sending one input a request")
    args = p.parse_args(argv)
    cfg = BenchConfig(
        model=find_model(args.model), servers=(WORKER, LLAMA_SERVER), prompt_lengths=(), concurrencies=(),
        requests_per_client=1, level_timeout_s=0, max_tokens=0, parallel=args.parallel, ctx_size=args.ctx_size,
        threads=args.threads, temperature=0.0, seed=0, llama_server_bin=find_llama_server(args.llama_server),
        out_dir=args.out, publish=args.publish, peer_args=("--embeddings", "--pooling", "mean"))
    inputs = texts(args.inputs)
    env = {**environment(cfg), "rounds": args.rounds}
    by_round: dict[tuple[str, int], dict[str, float]] = {}
    vectors: dict[str, Vectors] = {}
    for n, label in alternated(list(VARIANTS), args.rounds):
        server, flags, slots = VARIANTS[label]
        variant = replace(cfg, worker_args=("--embeddings", *flags), parallel=slots or cfg.parallel)
        with running_server(server, variant) as (url, _proc, _sampler, _startup_s, _argv):
            by_round[label, n], vectors[label] = asyncio.run(workload(url, inputs, args))
    results = {label: medians([by_round[label, n] for n in range(args.rounds)]) for label in VARIANTS}
    cosines = {label: min_cosine(vectors[label], vectors[EXACT]) for label in VARIANTS}
    # each peer: each worker mode: each figure's (ours, theirs) a round
    pairs = {peer: {label: {key: [(by_round[label, n][key], by_round[peer, n][key]) for n in range(args.rounds)]
                            for key in KEYS} for label in (EXACT, FAST)} for peer in PEERS}
    lines = ["# llm-worker embeddings benchmark", "", machine_line(cfg, env),
             f"- every server: {cfg.parallel} slots (but `{ONE_SLOT}`), {cfg.ctx_size} tokens of context, "
             f"{cfg.threads} threads, its default batch sizes; llama-server with `--embeddings --pooling mean`; "
             f"{args.inputs} distinct inputs of 5 to ~60 tokens, batched ({args.batch} a request, one client) and "
             f"single ({args.clients} clients, one a request), after a warm-up request",
             f"- {args.rounds} rounds, every server started once a round, the order reversed every other round; "
             "medians over the rounds", "",
             "| server | batched inputs/s | single inputs/s | least cosine to exact's vectors |", "|---|---|---|---|"]
    lines += [f"| {label} | {row['batched_inputs_s']:.1f} | {row['single_inputs_s']:.1f} | "
              f"{cosines[label]:.6f} |" for label, row in results.items()]
    for peer in PEERS:
        lines += ["", f"each round's ratio to {peer}, their median and range (higher is faster):"]
        lines += [f"- {label}: batched {round_ratios(pairs[peer][label]['batched_inputs_s'])}, single "
                  f"{round_ratios(pairs[peer][label]['single_inputs_s'])}" for label in (EXACT, FAST)]
    if args.publish:
        figures = {label: {**{key: round(value, 1) for key, value in row.items()},
                           "least_cosine": round(cosines[label], 6)}
                   for label, row in results.items()}
        ratios = {peer: {label: {key: each_ratio(each) for key, each in by_key.items()}
                         for label, by_key in by_label.items()} for peer, by_label in pairs.items()}
        write_summary("embeddings", env, figures, ratios)
    write_report("\n".join(lines) + "\n", args.out, "embeddings.md", "EMBEDDINGS.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
