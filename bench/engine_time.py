"""Where llm-worker's time went during a workload: its engine counters in /metrics, read before and after.

The counters (worker/api/metrics.py) count engine steps, the engine thread's busy time, and of that the time
inside llama_decode. Over the workload's wall time they say how much of it was the model itself, how much the
engine thread's Python (batches, sampling, detokenizing), and how long the engine waited for work. A step runs one
llama_decode for the decode rows and one per prefill chunk. Peers have no such counters: read() gives None.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {"llm_worker_engine_steps": "steps", "llm_worker_engine_step_seconds": "step_s",
            "llm_worker_engine_decode_seconds": "decode_s"}


@dataclass(frozen=True)
class EngineCounters:
    steps: float = 0.0
    step_s: float = 0.0  # engine thread busy
    decode_s: float = 0.0  # of that, inside llama_decode


@dataclass(frozen=True)
class EngineTime:
    """The counters' growth over `wall_s` seconds of a workload."""

    wall_s: float
    steps: int
    step_s: float
    decode_s: float

    @classmethod
    def between(cls, before: EngineCounters, after: EngineCounters, wall_s: float) -> EngineTime:
        return cls(wall_s, round(after.steps - before.steps), after.step_s - before.step_s,
                   after.decode_s - before.decode_s)

    @property
    def decode_share(self) -> float:
        """Of the wall time, the share inside llama_decode."""
        return self.decode_s / self.wall_s if self.wall_s else float("nan")

    @property
    def ms_per_step(self) -> float:
        return self.step_s / self.steps * 1e3 if self.steps else float("nan")

    @property
    def decode_ms_per_step(self) -> float:
        return self.decode_s / self.steps * 1e3 if self.steps else float("nan")

    @property
    def python_ms_per_step(self) -> float:
        """The engine thread's time a step outside llama_decode."""
        return (self.step_s - self.decode_s) / self.steps * 1e3 if self.steps else float("nan")


async def read(session: aiohttp.ClientSession, url: str) -> EngineCounters | None:
    """The worker's engine counters now; None for a server without them."""
    try:
        async with session.get(url + "/metrics") as response:
            if response.status != 200:
                return None
            text = await response.text()
    except aiohttp.ClientError:
        return None
    try:
        values = {COUNTERS[family.name]: family.samples[0].value
                  for family in text_string_to_metric_families(text) if family.name in COUNTERS and family.samples}
    except ValueError:  # a 200 that is not Prometheus text
        return None
    return EngineCounters(**values) if len(values) == len(COUNTERS) else None
