#!/usr/bin/env python3
"""Reranking: 32 documents of ~200 tokens against one query, llm-worker vs llama-server --rerank, on the same GGUF.

llama-server reranks only with --rerank (rank pooling; on a model without a rank head it scores the last hidden
state), and then serves no completions; llm-worker reranks any model (worker/engine/pooling/rerank.py). Each server
answers ROUNDS rerank requests alone (wall time each, the first one a warm-up); then llm-worker answers them again
while STREAMS closed-loop greedy completions stream beside them, whose inter-token gaps during the reranks are
reported: a long rerank must not stall them (target: ITL p99 <= 4x p50). Run: .venv/bin/python bench/run.py rerank
[--publish]   (bench/RERANK.md; docs/models.md, "Reranking")
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.client import RequestResult, new_session, stream_completion
from bench.config import LLAMA_SERVER, WORKER, BenchConfig, add_peer_flags, find_llama_server, find_model
from bench.report import environment, machine_line, write_report
from bench.servers import running_server

QUERY = "Which harbour rule covers ships arriving after dark?"
TOPICS = ("harbour pilots", "night arrivals", "cargo inspection", "tide tables", "fishing quotas", "lighthouse upkeep",
          "customs forms", "berth fees")


def documents(count: int) -> list[str]:
    """`count` documents of ~200 tokens each, each its own text."""
    return [" ".join(f"Rule {n}.{k} on {TOPICS[(n + k) % len(TOPICS)]}: the office records the vessel, its crew and "
                     f"its cargo before {k + 6} o'clock, and a copy goes to the harbour master." for k in range(6))
            for n in range(count)]


async def rerank_once(url: str, docs: list[str]) -> float:
    started = time.perf_counter()
    async with new_session() as session, session.post(url + "/v1/rerank",
                                                      json={"query": QUERY, "documents": docs}) as response:
        response.raise_for_status()
        await response.json()
    return time.perf_counter() - started


async def with_streams(url: str, docs: list[str], args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Rerank walls while `args.streams` completions stream beside them, and the streams' gaps meanwhile."""
    results: list[RequestResult] = []
    reranking = True

    async def stream(i: int) -> None:
        body = {"prompt": f"Tell a long story about harbour {i}.", "max_tokens": 64, "temperature": 0,
                "stream": True}
        while reranking:
            result = RequestResult(i, time.perf_counter())
            async with new_session() as session:
                await stream_completion(session, url, body, result)
            results.append(result)

    streams = [asyncio.ensure_future(stream(i)) for i in range(args.streams)]
    await asyncio.sleep(2.0)  # they are streaming
    begun = time.perf_counter()
    walls = [await rerank_once(url, docs) for _ in range(args.rounds)]
    ended = time.perf_counter()
    reranking = False
    await asyncio.gather(*streams)
    gaps = [b - a for r in results for a, b in zip(r.chunk_times, r.chunk_times[1:]) if begun <= a and b <= ended]
    return walls, gaps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=4, ctx_size=8192, report="RERANK.md")
    p.add_argument("--documents", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--streams", type=int, default=2)
    args = p.parse_args(argv)
    cfg = BenchConfig(
        model=find_model(args.model), servers=(WORKER, LLAMA_SERVER), prompt_lengths=(), concurrencies=(),
        requests_per_client=1, level_timeout_s=0, max_tokens=0, parallel=args.parallel, ctx_size=args.ctx_size,
        threads=args.threads, temperature=0.0, seed=0, llama_server_bin=find_llama_server(args.llama_server),
        out_dir=args.out, publish=args.publish, peer_args=("--rerank",))
    docs = documents(args.documents)
    env = environment(cfg)
    lines = ["# llm-worker rerank benchmark", "", machine_line(cfg, env),
             f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads; "
             f"{args.rounds} reranks of {args.documents} documents of ~200 tokens (after a warm-up one); llama-server "
             f"with --rerank", "", "| server | beside it | rerank wall s (median) | streams' ITL p50 ms | p99 ms |",
             "|---|---|---|---|---|"]
    walls = {}
    for server in cfg.servers:
        with running_server(server, replace(cfg)) as (url, _proc, _sampler, _startup, _argv):
            asyncio.run(rerank_once(url, docs))  # warm-up
            walls[server] = statistics.median([asyncio.run(rerank_once(url, docs)) for _ in range(args.rounds)])
            lines.append(f"| {server} | nothing | {walls[server]:.2f} | | |")
            if server == WORKER:
                beside, gaps = asyncio.run(with_streams(url, docs, args))
                p50, p99 = statistics.median(gaps), statistics.quantiles(gaps, n=100)[98]
                lines.append(f"| {server} | {args.streams} greedy streams | {statistics.median(beside):.2f} | "
                             f"{p50 * 1e3:.1f} | {p99 * 1e3:.1f} |")
    lines += ["", f"rerank wall, llm-worker / llama-server: {walls[WORKER] / walls[LLAMA_SERVER]:.2f}x "
                  "(target <= 1.0x); the streams' ITL p99 / p50 beside it is the last row's (target <= 4x)"]
    write_report("\n".join(lines) + "\n", args.out, "rerank.md", "RERANK.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
