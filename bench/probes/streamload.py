"""Probe: a worker's engine steps under N greedy streams, for a profiler beside it (bench/probes/gpuprofile.sh).

N streamed completions of TOKENS tokens (end of text biased away, so every stream runs its length) for ROUNDS rounds
after one round of warm-up, then the engine's own counters from /metrics: steps, the thread's time in them, and of
that the time inside llama_decode (on a GPU llama_decode returns once the work is queued: the wait for the logits
falls in the sampler's call).

Usage: python bench/probes/streamload.py URL STREAMS ROUNDS
"""

from __future__ import annotations

import asyncio
import re
import sys
import time

import aiohttp

TOKENS = 256  # a stream's length
COUNTERS = ("llm_worker_engine_steps_total", "llm_worker_engine_step_seconds_total",
            "llm_worker_engine_decode_seconds_total")


async def stream(session: aiohttp.ClientSession, url: str, index: int) -> int:
    body = {"prompt": f"Story {index}: once upon a time", "max_tokens": TOKENS, "temperature": 0, "stream": True,
            "logit_bias": {"0": -100, "1": -100, "2": -100}}
    async with session.post(url + "/v1/completions", json=body) as response:
        return sum([line.startswith(b"data: {") async for line in response.content])


async def counters(session: aiohttp.ClientSession, url: str) -> list[float]:
    async with session.get(url + "/metrics") as response:
        text = await response.text()
    return [float(m.group(1)) if (m := re.search(rf"^{name} (\S+)$", text, re.M)) else float("nan")
            for name in COUNTERS]


async def main(url: str, streams: int, rounds: int) -> None:
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(stream(session, url, i) for i in range(streams)))  # warm-up
        before = await counters(session, url)
        began, tokens = time.perf_counter(), 0
        for _ in range(rounds):
            tokens += sum(await asyncio.gather(*(stream(session, url, i) for i in range(streams))))
        wall = time.perf_counter() - began
        steps, step_s, decode_s = (a - b for a, b in zip(await counters(session, url), before))
        per = 1e3 / max(steps, 1)
        print(f"streams={streams} tokens={tokens} {tokens / wall:.0f} tok/s steps={steps:.0f} "
              f"wall/step={wall * per:.3f} ms step={step_s * per:.3f} ms in llama_decode={decode_s * per:.3f} ms")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
