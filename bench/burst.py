#!/usr/bin/env python3
"""A burst of requests sharing one new system prompt, llm-worker vs llama-server in one run.

Agents and batch jobs fire several requests at once with the same long instructions. Each round sends
CLIENTS streamed chat requests together, all with the same ~600-token system prompt that no earlier round
used and a question of their own; it reports the round's wall time (all answers done) and the mean time to
first token, averaged over the rounds. Run: .venv/bin/python bench/run.py burst [--rounds N] [--clients N]
[--publish]   (bench/BURST.md; docs/cache-and-exactness.md, "Prefix cache")
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.client import new_session
from bench.config import LLAMA_SERVER, WORKER, BenchConfig, add_peer_flags, find_llama_server, find_model
from bench.report import environment, machine_line, write_report
from bench.servers import running_server

RULE = "You are the assistant of a busy harbour office; answer in one sentence and cite the rule. "


async def one(url: str, system: str, question: str) -> tuple[float, float]:
    """(time to first text, time to the end) of one streamed chat request."""
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "max_tokens": 16, "temperature": 0, "stream": True}
    sent, first = time.perf_counter(), None
    async with new_session() as session, session.post(url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.content:
            if first is None and b'"content":"' in line and b'"content":""' not in line:
                first = time.perf_counter() - sent
    return first or float("nan"), time.perf_counter() - sent


async def rounds(url: str, args: argparse.Namespace) -> tuple[float, float]:
    """Mean round wall time and mean TTFT, in seconds."""
    walls, ttfts = [], []
    for n in range(-1, args.rounds):  # -1: warm-up
        system = f"Round {n}. " + RULE * 28
        started = time.perf_counter()
        done = await asyncio.gather(*(one(url, system, f"Question {i}: which rule applies?")
                                      for i in range(args.clients)))
        if n >= 0:
            walls.append(time.perf_counter() - started)
            ttfts += [first for first, _ in done]
    return statistics.fmean(walls), statistics.fmean(ttfts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=4, ctx_size=8192, report="BURST.md")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", type=int, default=4)
    args = p.parse_args(argv)
    cfg = BenchConfig(
        model=find_model(args.model), servers=(WORKER, LLAMA_SERVER), prompt_lengths=(), concurrencies=(),
        requests_per_client=1, level_timeout_s=0, max_tokens=16, parallel=args.parallel, ctx_size=args.ctx_size,
        threads=args.threads, temperature=0.0, seed=0, llama_server_bin=find_llama_server(args.llama_server),
        out_dir=args.out, publish=args.publish,
    )
    env = environment(cfg)
    lines = ["# llm-worker burst benchmark", "", machine_line(cfg, env),
             f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads; "
             f"{args.rounds} rounds of {args.clients} streamed chat requests sent together, one new ~600-token "
             "system prompt per round, 16 greedy tokens each", "",
             "| server | round wall s | mean TTFT s |", "|---|---|---|"]
    results = {}
    for server in cfg.servers:
        with running_server(server, cfg) as (url, _proc, _sampler, _startup_s, _argv):
            results[server] = asyncio.run(rounds(url, args))
        lines.append(f"| {server} | {results[server][0]:.2f} | {results[server][1]:.2f} |")
    wall, ttft = (results[WORKER][i] / results[LLAMA_SERVER][i] for i in range(2))
    lines += ["", f"llm-worker / llama-server: round wall time {wall:.2f}x, mean TTFT {ttft:.2f}x (lower is better)"]
    write_report("\n".join(lines) + "\n", args.out, "burst.md", "BURST.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
