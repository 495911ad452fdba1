#!/usr/bin/env python3
"""A burst of requests sharing one new system prompt, llm-worker vs llama-server in one run.

Agents and batch jobs fire several requests at once with the same long instructions. Each round sends
CLIENTS streamed chat requests together, all with the same ~600-token system prompt that no earlier round
used and a question of their own; it reports a burst's wall time (all answers done) and the mean time to first
token, averaged over BURSTS bursts after a warm-up one. --rounds R starts every server R times, in turn, the order
reversed every other round: figures are medians over the rounds, ratios each round's with their median.
Run: .venv/bin/python bench/run.py burst [--rounds 3] [--bursts 3] [--clients N] [--publish]   (bench/BURST.md;
docs/cache-and-exactness.md, "Prefix cache")
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
from bench.config import (
    DRAFT_LINES,
    DRAFTS,
    LLAMA_SERVER,
    WORKER,
    BenchConfig,
    add_drafts_flag,
    add_peer_flags,
    find_llama_server,
    find_model,
)
from bench.report import environment, machine_line, write_report, write_summary
from bench.rounds import alternated, each_ratio, medians, round_ratios
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


async def bursts(url: str, args: argparse.Namespace, round_: int) -> dict[str, float]:
    """Mean burst wall time and mean TTFT, in seconds."""
    walls, ttfts = [], []
    for n in range(-1, args.bursts):  # -1: warm-up
        system = f"Round {round_}, burst {n}. " + RULE * 28
        started = time.perf_counter()
        done = await asyncio.gather(*(one(url, system, f"Question {i}: which rule applies?")
                                      for i in range(args.clients)))
        if n >= 0:
            walls.append(time.perf_counter() - started)
            ttfts += [first for first, _ in done]
    return {"burst_wall_s": statistics.fmean(walls), "mean_ttft_s": statistics.fmean(ttfts)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=4, ctx_size=8192, report="BURST.md")
    p.add_argument("--rounds", type=int, default=3, help="every server started once a round")
    p.add_argument("--bursts", type=int, default=3, help="bursts a server runs in a round (after a warm-up one)")
    p.add_argument("--clients", type=int, default=4)
    add_drafts_flag(p)
    args = p.parse_args(argv)
    cfg = BenchConfig(
        model=find_model(args.model), servers=(WORKER, LLAMA_SERVER), prompt_lengths=(), concurrencies=(),
        requests_per_client=1, level_timeout_s=0, max_tokens=16, parallel=args.parallel, ctx_size=args.ctx_size,
        threads=args.threads, temperature=0.0, seed=0, llama_server_bin=find_llama_server(args.llama_server),
        out_dir=args.out, publish=args.publish, worker_args=DRAFTS[args.drafts][0], peer_args=DRAFTS[args.drafts][1],
    )
    env = {**environment(cfg), "drafts": args.drafts, "rounds": args.rounds}
    lines = ["# llm-worker burst benchmark", "", machine_line(cfg, env),
             f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads; "
             f"{args.bursts} bursts of {args.clients} streamed chat requests sent together after a warm-up one, one "
             f"new ~600-token system prompt per burst, 16 greedy tokens each; drafts {DRAFT_LINES[args.drafts]}",
             f"- {args.rounds} rounds, every server started once a round, the order reversed every other round; "
             "medians over the rounds", "",
             "| server | burst wall s | mean TTFT s |", "|---|---|---|"]
    by_round: dict[tuple[str, int], dict[str, float]] = {}
    for n, server in alternated(cfg.servers, args.rounds):
        with running_server(server, cfg) as (url, _proc, _sampler, _startup_s, _argv):
            by_round[server, n] = asyncio.run(bursts(url, args, n))
    results = {server: medians([by_round[server, n] for n in range(args.rounds)]) for server in cfg.servers}
    lines += [f"| {server} | {row['burst_wall_s']:.2f} | {row['mean_ttft_s']:.2f} |" for server, row in results.items()]
    pairs = {key: [(by_round[WORKER, n][key], by_round[LLAMA_SERVER, n][key]) for n in range(args.rounds)]
             for key in ("burst_wall_s", "mean_ttft_s")}
    lines += ["", f"llm-worker / llama-server, each round's ratio, their median and range (lower is better): burst "
                  f"wall time {round_ratios(pairs['burst_wall_s'])}, mean TTFT {round_ratios(pairs['mean_ttft_s'])}"]
    if args.publish:
        write_summary("burst", env, {server: {key: round(value, 2) for key, value in row.items()}
                                     for server, row in results.items()},
                      {WORKER: {key: each_ratio(each) for key, each in pairs.items()}})
    write_report("\n".join(lines) + "\n", args.out, "burst.md", "BURST.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
