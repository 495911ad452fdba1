#!/usr/bin/env python3
"""LoRA adapters under load: two adapters alternating over closed-loop streams, llm-worker vs llama-server.

Two steering adapters are made from the model (bench/adapters.py) and both servers load them (--lora A --lora B).
CLIENTS closed-loop clients each stream REQUESTS completions back to back, client i under adapter i % 2 through
the request's own `lora` list (llama-server's field), every request MAX_TOKENS greedy tokens; then the same
clients on the base model (every adapter at scale 0), and on llm-worker with every client under one adapter, so
that what the adapter groups' turns cost (worker/engine/core/adapter_turns.py) stands apart from what an adapter's
products cost.
Reports aggregate tok/s and the streams' inter-token gaps. --rounds R starts every server R times, in turn, the
order reversed every other round: tok/s are medians over the rounds, gaps every round's together.
Run: .venv/bin/python bench/run.py lora [--rounds 3] [--publish]   (bench/LORA.md; docs/models.md, "LoRA adapters")
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.adapters import PURPLE, ZEBRA, Base, steering_adapter
from bench.client import RequestResult, new_session, stream_completion
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
from bench.rounds import alternated, each_ratio, round_ratios
from bench.servers import running_server

STEERED = (ZEBRA, PURPLE)  # the tokens the two adapters both servers load raise
PROMPT = "Write a short story about a lighthouse keeper who finds a map in a bottle on the beach."


async def load(url: str, args: argparse.Namespace, adapter_of: list[int | None]) -> tuple[float, list[float]]:
    """Aggregate tok/s and every gap between a stream's chunks; client i under adapter adapter_of[i] (None: base)."""
    results: list[RequestResult] = []

    async def client(i: int) -> None:
        # The base model is every adapter at scale 0: llama-server reads `lora: []` as "the loaded adapters at their
        # --lora scales" (both here), where llm-worker reads it as none.
        lora = ([{"id": adapter, "scale": 0.0} for adapter in range(len(STEERED))] if adapter_of[i] is None
                else [{"id": adapter_of[i], "scale": 1.0}])
        body = {"prompt": f"{PROMPT} ({i})", "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "lora": lora}
        for _ in range(args.requests):
            result = RequestResult(i, time.perf_counter())
            async with new_session() as session:
                await stream_completion(session, url, body, result)
            if result.error:
                raise RuntimeError(result.error)
            results.append(result)

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(args.clients)))
    wall = time.perf_counter() - started
    gaps = [b - a for r in results for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    return sum(r.tokens for r in results) / wall, gaps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_peer_flags(p, parallel=8, ctx_size=8192, report="LORA.md")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="every server started once a round")
    add_drafts_flag(p)
    args = p.parse_args(argv)
    model = find_model(args.model)
    lines = ["# llm-worker LoRA benchmark", ""]
    with tempfile.TemporaryDirectory() as tmp:
        base = Base.read(model)
        adapters = [str(steering_adapter(base, token, Path(tmp) / f"{token}.gguf")) for token in STEERED]
        lora_flags = tuple(flag for path in adapters for flag in ("--lora", path))
        cfg = BenchConfig(
            model=model, servers=(WORKER, LLAMA_SERVER), prompt_lengths=(), concurrencies=(), requests_per_client=1,
            level_timeout_s=0, max_tokens=args.max_tokens, parallel=args.parallel, ctx_size=args.ctx_size,
            threads=args.threads, temperature=0.0, seed=0, llama_server_bin=find_llama_server(args.llama_server),
            out_dir=args.out, publish=args.publish, worker_args=(*DRAFTS[args.drafts][0], *lora_flags),
            peer_args=(*DRAFTS[args.drafts][1], *lora_flags))
        env = {**environment(cfg), "drafts": args.drafts, "rounds": args.rounds}
        lines += [machine_line(cfg, env),
                  f"- every server: {cfg.parallel} slots, {cfg.ctx_size} tokens of context, {cfg.threads} threads, "
                  f"two rank-32 steering adapters loaded; {args.clients} closed-loop clients x {args.requests} "
                  f"streamed completions of {args.max_tokens} greedy tokens; drafts {DRAFT_LINES[args.drafts]}",
                  f"- {args.rounds} rounds, every server started once a round, the order reversed every other round; "
                  "tok/s medians over the rounds, the gaps of every round together", "",
                  "| server | adapters per client | tok/s | ITL p50 ms | ITL p99 ms |", "|---|---|---|---|---|"]
        alternating = [i % 2 for i in range(args.clients)]
        runs = {WORKER: {"two, alternating": alternating, "one, all": [0] * args.clients,
                         "none (every scale 0)": [None] * args.clients},
                LLAMA_SERVER: {"two, alternating": alternating, "none (every scale 0)": [None] * args.clients}}
        rates: dict[tuple[str, str], list[float]] = {}
        gaps: dict[tuple[str, str], list[float]] = {}
        for _n, server in alternated(list(runs), args.rounds):
            with running_server(server, replace(cfg, out_dir=args.out)) as (url, _proc, _sampler, _startup, _argv):
                # A round unmeasured first: a fresh server's first calls under each set cost more (its compute
                # buffers are first touched then), and whichever load ran first paid for it.
                asyncio.run(load(url, argparse.Namespace(**{**vars(args), "requests": 1}), alternating))
                for label, adapter_of in runs[server].items():
                    rate, seen = asyncio.run(load(url, args, adapter_of))
                    rates.setdefault((server, label), []).append(rate)
                    gaps.setdefault((server, label), []).extend(seen)
    tok_s = {key: statistics.median(values) for key, values in rates.items()}
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for (server, label), rate in tok_s.items():
        p50, p99 = statistics.median(gaps[server, label]), statistics.quantiles(gaps[server, label], n=100)[98]
        lines.append(f"| {server} | {label} | {rate:.1f} | {p50 * 1e3:.1f} | {p99 * 1e3:.1f} |")
        figures.setdefault(server, {})[label] = {"tok_s": round(rate, 1), "itl_p50_ms": round(p50 * 1e3, 1),
                                                  "itl_p99_ms": round(p99 * 1e3, 1)}
    pairs = list(zip(rates[WORKER, "two, alternating"], rates[LLAMA_SERVER, "two, alternating"]))
    cost = tok_s[WORKER, "two, alternating"] / tok_s[WORKER, "one, all"]
    lines += ["", f"two adapters alternating: llm-worker / llama-server tok/s {round_ratios(pairs)} (each round's "
                  f"ratio, their median and range; target >= 0.9x); llm-worker two alternating / one for all "
                  f"{cost:.2f}x (what the turns cost)"]
    if args.publish:
        write_summary("lora", env, figures, {WORKER: {"two, alternating tok_s": each_ratio(pairs)}})
    write_report("\n".join(lines) + "\n", args.out, "lora.md", "LORA.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
