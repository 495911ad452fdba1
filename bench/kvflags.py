#!/usr/bin/env python3
"""Memory flags on the test model: idle and peak RSS for each KV cell type and flash attention setting in exact and
fast mode, and llama-server's (its defaults: f16 cells, flash attention auto, -ub 512) for scale.

Each configuration runs its own server alone, serves one greedy 256-token completion after a 1,500-token
prompt (EOS banned), drafts off, and reports its RSS once idle (before the request) and at its peak, each less the
model file, beside the KV cells it allocated (resident only as far as they are written: patch 0013 gives a cleared
buffer's pages back). One run, not alternated rounds: a memory table (RSS is not timing-sensitive), llama-server
beside it for scale; what the cell types cost in speed is not timed here (one request's decode is too noisy).
Run: .venv/bin/python bench/run.py kvflags [--llama-server PATH] [--publish]   (bench/KVFLAGS.md;
docs/cache-and-exactness.md, "KV cache types and flash attention")
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.client import RequestResult, new_session, request_body, stream_completion
from bench.config import BENCH_DIR, LLAMA_SERVER, MB, WORKER, BenchConfig, find_llama_server, find_model
from bench.prompts import PromptFactory
from bench.report import environment, machine_line, write_report
from bench.servers import process_tree_rss, running_server

# (server, K type, V type, flash attention, prefix-cache mode, --ubatch-size): each mode's default cells (f16) and
# attention, then the quantized cells (which need flash attention), and exact mode without flash attention.
# llama-server runs with its defaults.
CONFIGS = [
    (WORKER, "f16", "f16", "auto", "exact", 256),
    (WORKER, "q8_0", "q8_0", "auto", "exact", 256),
    (WORKER, "q4_0", "q4_0", "auto", "exact", 256),
    (WORKER, "f16", "f16", "off", "exact", 256),
    (WORKER, "f16", "f16", "auto", "fast", 256),
    (WORKER, "q8_0", "q8_0", "on", "fast", 256),
    (LLAMA_SERVER, "f16", "f16", "auto", "its own", 512),
]
IDLE_S = 1.0  # past the engine's idle settle (0.25 s)
BYTES_PER_CELL = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-server")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="where the servers' logs go")
    p.add_argument("--publish", action="store_true", help="write bench/KVFLAGS.md too")
    args = p.parse_args(argv)
    model = find_model(None)
    prompts = PromptFactory(model)
    no_eos = {str(t): -100.0 for t in prompts.end_of_generation}
    base = BenchConfig(model=model, servers=(), prompt_lengths=(), concurrencies=(), requests_per_client=1,
                       level_timeout_s=0, max_tokens=256, parallel=4, ctx_size=8192, threads=2, temperature=0.0, seed=0,
                       llama_server_bin=find_llama_server(args.llama_server), out_dir=args.out, publish=False)
    f16_kv = prompts.kv_cache_bytes(base.ctx_size)  # f16 K and V: 2 bytes a value each
    model_mb = model.stat().st_size / MB
    env = environment(base)
    lines = ["# KV cell types and flash attention: memory", "", machine_line(base, env),
             f"- commit {env['commit']}; each configuration its own server, alone: {base.parallel} slots, "
             f"{base.ctx_size} tokens of context, {base.threads} threads; one greedy 256-token completion after a "
             "1,500-token prompt; one run", "",
             "MB are MiB; \"idle\" is RSS once the server has loaded and warmed up, \"peak\" the highest sampled while "
             "the request ran, both less the model file; the KV cells are resident only as far as they are written.",
             "", "| server | K | V | flash attention | prefix cache | -ub | KV cells allocated MB | peak RSS MB "
             "| idle RSS - model MB | peak RSS - model MB |", "|---" * 10 + "|"]
    for server, k, v, flash, mode, ubatch in CONFIGS:
        cfg = dataclasses.replace(base, worker_args=("--spec-type", "none", "--cache-type-k", k, "--cache-type-v", v,
                                                     "--flash-attn", flash, "--prefix-cache", mode,
                                                     "--ubatch-size", str(ubatch)))
        with running_server(server, cfg) as (url, proc, sampler, _startup, _argv):
            time.sleep(IDLE_S)
            idle = process_tree_rss(proc.pid)
            result = RequestResult(client=0, sent=time.perf_counter())

            async def once() -> None:
                async with new_session() as session:
                    await stream_completion(session, url, request_body(cfg, prompts.prompt(1500), 0, no_eos, 256),
                                            result)
            asyncio.run(once())
            time.sleep(0.3)
            peak = sampler.peak()
        row = f"| {server} | {k} | {v} | {flash} | {mode} | {ubatch} |"
        if result.error:
            lines.append(f"{row} error: {result.error} ||||")
            continue
        kv_mb = f16_kv * (BYTES_PER_CELL[k] + BYTES_PER_CELL[v]) / 4 / MB
        lines.append(f"{row} {kv_mb:.0f} | {peak / MB:.0f} | {idle / MB - model_mb:.0f} | {peak / MB - model_mb:.0f} |")
    write_report("\n".join(lines) + "\n", args.out, "kvflags.md", "KVFLAGS.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
