#!/usr/bin/env python3
"""KV memory flags on the test model: peak RSS and single-stream decode tok/s for each cache type and flash setting.

Each configuration runs its own llm-worker alone, serves one greedy 256-token completion after a 1,500-token
prompt (EOS banned), and reports the worker's peak RSS, RSS less the model file and the KV cache it allocated,
and decode tok/s. Run: .venv/bin/python bench/kvflags.py   (README "KV cache types and flash attention")
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.run import (  # noqa: E402
    WORKER, BenchConfig, PromptFactory, RequestResult, find_model, new_session, request_body, running_server,
    stream_completion,
)

MB = 1024 * 1024
# (K type, V type, flash attention, prefix-cache mode): a quantized V cache needs flash attention, which exact turns off.
CONFIGS = [
    ("f16", "f16", "off", "exact"),
    ("f16", "f16", "on", "fast"),
    ("q8_0", "f16", "off", "exact"),
    ("q8_0", "q8_0", "on", "fast"),
    ("q4_0", "q4_0", "on", "fast"),
]
BYTES_PER_CELL = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}


def main() -> int:
    model = find_model(None)
    prompts = PromptFactory(model)
    no_eos = {str(t): -100.0 for t in prompts.end_of_generation}
    base = BenchConfig(model=model, servers=(), prompt_lengths=(), concurrencies=(), requests_per_client=1,
                       level_timeout_s=0, max_tokens=256, parallel=4, ctx_size=8192, threads=2, temperature=0.0, seed=0,
                       llama_server_bin=None, out_dir=Path(__file__).resolve().parent / "results", publish=False)
    f16_kv = prompts.kv_cache_bytes(base.ctx_size)  # f16 K and V: 2 bytes a value each
    model_mb = model.stat().st_size / MB
    print("| K | V | flash attention | prefix cache | peak RSS MB | RSS - model - KV MB | decode tok/s |")
    print("|---|---|---|---|---|---|---|")
    for k, v, flash, mode in CONFIGS:
        cfg = dataclasses.replace(base, worker_args=("--cache-type-k", k, "--cache-type-v", v,
                                                     "--flash-attn", flash, "--prefix-cache", mode))
        with running_server(WORKER, cfg) as (url, _proc, sampler, _startup, _argv):
            result = RequestResult(client=0, sent=time.perf_counter())

            async def once() -> None:
                async with new_session() as session:
                    await stream_completion(session, url, request_body(cfg, prompts.prompt(1500), 0, no_eos, 256),
                                            result)
            asyncio.run(once())
            time.sleep(0.3)
            peak = sampler.peak()
        if result.error:
            print(f"| {k} | {v} | {flash} | {mode} | error: {result.error} |||")
            continue
        kv_mb = f16_kv * (BYTES_PER_CELL[k] + BYTES_PER_CELL[v]) / 4 / MB
        times = result.chunk_times
        tps = (result.tokens - 1) / (times[-1] - times[0])
        print(f"| {k} | {v} | {flash} | {mode} | {peak / MB:.0f} | {peak / MB - model_mb - kv_mb:.0f} | {tps:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
