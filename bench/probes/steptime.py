"""Probe: one stream's step, part by part: where the time between two tokens goes besides llama_decode.

1. The engine thread, in this process: the model loaded as the worker loads it (startup/load.py), one greedy request
   of TOKENS tokens (end of generation banned, so every run decodes as many), each part of the step timed by a wrapper
   around the function that does it: planning (admission and the plan), the runner's step less its llama_decode and
   sampling (batch fill, draft offers, the step output), the sampler chain, the step's update less the token output
   (retirement, the pace, outcomes), the token output (detokenizing, stop strings, the event), the hand-off to the
   event loop, and the loop's own rest (locks, the wait for work, counters). Microseconds a step, medians of ROUNDS.
2. The event loop's thread, in a served worker: `llm-worker serve` streaming the same prompt over HTTP (SSE), its
   main thread's CPU time a token (/proc/PID/task/PID/stat: the event loop, aiohttp, the chunk's JSON, the write),
   read before and after the stream. It runs while the engine thread is inside llama_decode (engine/handoff.py), so
   on 2 cores it takes its time from llama.cpp's threads.
The wrappers add ~1 us a part. Speeds of the kernels are not this probe's: use the bench/ comparison for those.
Run: .venv/bin/python bench/probes/steptime.py [MODEL.gguf]
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import find_model
from bench.prompts import PromptFactory

TOKENS, ROUNDS = 256, 5
PROMPT = "Write a long story about a lighthouse keeper and the ships she watched over the years."
# (class path, method, part): each wrapped method's time goes to its part, less the parts of what it calls.
WRAPPED = (
    ("worker.engine.core.loop.EngineLoop", "_step", "step"),
    ("worker.engine.core.scheduler.Scheduler", "admit", "plan"),
    ("worker.engine.core.scheduler.Scheduler", "plan", "plan"),
    ("worker.engine.core.runner.ModelRunner", "run", "runner"),
    ("worker.engine.core.runner.ModelRunner", "_llama_decode", "llama_decode"),
    ("worker.engine.output.sampler.Sampler", "sample", "sampler chain"),
    ("worker.engine.core.step_update.StepUpdate", "apply", "update"),
    ("worker.engine.core.token_output.TokenOutput", "append", "token output"),
    ("worker.engine.handoff.Handoff", "post", "hand-off"),
)
NESTED = {"step": ("plan", "runner", "update", "hand-off"), "runner": ("llama_decode", "sampler chain"),
          "update": ("token output",)}


class PartTimes:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner: type, method: str, part: str) -> None:
        original = getattr(owner, method)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - started
                self.calls[part] += 1

        setattr(owner, method, timed)

    def per_step_us(self) -> dict[str, float]:
        """Each part's own microseconds a step (a nesting part less the parts inside it)."""
        steps = self.calls["step"] or 1
        own = {part: seconds - sum(self.seconds[inner] for inner in NESTED.get(part, ()))
               for part, seconds in self.seconds.items()}
        return {part: own[part] / steps * 1e6 for part in own}


def engine_parts(path: Path, no_eos: list[int]) -> list[dict[str, float]]:
    import importlib

    from worker.engine.host import EngineConfig, choose_library, load_library

    config = EngineConfig(parallel=1, ctx_size=4096)
    load_library(choose_library(path, config))  # as the worker does: before llama_cpp is first imported
    from worker.engine.host import load_model
    from worker.engine.requests import Request, SamplingParams

    times = PartTimes()
    for target, method, part in WRAPPED:
        module, name = target.rsplit(".", 1)
        times.wrap(getattr(importlib.import_module(module), name), method, part)
    loop = asyncio.new_event_loop()
    served = load_model(path, config, loop)
    prompt = served.prompts.tokenize(PROMPT)
    sampling = SamplingParams(temperature=0.0, logit_bias={token: float("-inf") for token in no_eos})
    rounds = []

    async def one() -> int:
        events = 0
        async for _ in served.engine.submit(Request(list(prompt), TOKENS, sampling)):
            events += 1
        return events

    for _ in range(ROUNDS):
        times.seconds.clear()
        times.calls.clear()
        events = loop.run_until_complete(one())
        parts = times.per_step_us()
        parts["steps"] = times.calls["step"]
        parts["events"] = events
        rounds.append(parts)
    served.engine.shutdown()
    return rounds


def _cpu_seconds(pid: int, tid: int) -> float:
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def loop_thread(path: Path, no_eos: list[int]) -> list[float]:
    """The served worker's main thread (its event loop): CPU microseconds a streamed token."""
    import aiohttp

    from tests.conftest import start_worker

    worker = start_worker(Path(os.environ.get("TMPDIR", "/tmp")), "--model", str(path), "--parallel", "1")
    pid = worker.process.pid
    body = {"prompt": PROMPT, "temperature": 0, "max_tokens": TOKENS, "stream": True,
            "logit_bias": {str(token): -100.0 for token in no_eos}}

    async def stream(http: aiohttp.ClientSession) -> int:
        chunks = 0
        async with http.post(worker.url + "/v1/completions", json=body) as response:
            async for line in response.content:
                chunks += line.startswith(b"data: {")
        return chunks

    async def run() -> list[float]:
        per_token = []
        async with aiohttp.ClientSession() as http:
            await stream(http)  # warm
            for _ in range(ROUNDS):
                before = _cpu_seconds(pid, pid)
                chunks = await stream(http)
                per_token.append((_cpu_seconds(pid, pid) - before) / chunks * 1e6)
        return per_token

    try:
        return asyncio.run(run())
    finally:
        worker.stop()


def main() -> None:
    path = find_model(sys.argv[1] if len(sys.argv) > 1 else None)
    no_eos = list(PromptFactory(path).end_of_generation)
    rounds = engine_parts(path, no_eos)
    print(f"{path.name}: one stream, {TOKENS} tokens, {ROUNDS} rounds; the engine thread, us a step (median):")
    for part in rounds[0]:
        print(f"  {part:>14}: {statistics.median(r[part] for r in rounds):9.1f}")
    python = [sum(v for k, v in r.items() if k not in ("llama_decode", "steps", "events")) for r in rounds]
    print(f"  {'python, all':>14}: {statistics.median(python):9.1f}")
    loop_us = loop_thread(path, no_eos)
    print(f"the event loop's thread, CPU us a streamed token (median of {ROUNDS}): {statistics.median(loop_us):.1f} "
          f"(rounds: {', '.join(f'{us:.0f}' for us in loop_us)})")


if __name__ == "__main__":
    main()
