"""One streamed completion, measured as a client sees it: when each chunk of text arrives and how many tokens."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.config import BenchConfig


@dataclass
class RequestResult:
    client: int
    sent: float  # perf_counter when the request was sent
    chunk_times: list[float] = field(default_factory=list)  # arrivals of chunks carrying text
    tokens: float = 0.0  # usage.completion_tokens when the server reports it, else text chunks
    error: str | None = None
    cut: bool = False  # still streaming when the level's timeout ran out, so cancelled

    @property
    def complete(self) -> bool:
        return self.error is None and not self.cut and bool(self.chunk_times)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.sent if self.chunk_times else None


def request_body(cfg: BenchConfig, prompt: str, seed: int, no_eos: dict[str, float], max_tokens: int) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": cfg.temperature,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
        # Not every server has ignore_eos, but all three honour logit_bias: banning the
        # end-of-generation tokens makes every request generate exactly max_tokens.
        "logit_bias": no_eos,
    }


async def stream_completion(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                            result: RequestResult) -> None:
    async with session.post(url + "/v1/completions", json=body) as resp:
        if resp.status != 200:
            result.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
            return
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            event = json.loads(data)
            if "error" in event:
                result.error = str(event["error"])[:200]
                return
            choices = event.get("choices") or []
            if choices and choices[0].get("text"):
                result.chunk_times.append(time.perf_counter())
                result.tokens += 1  # provisional: one token per chunk until usage says otherwise
            if event.get("usage") and event["usage"].get("completion_tokens") is not None:
                result.tokens = float(event["usage"]["completion_tokens"])


def new_session() -> aiohttp.ClientSession:
    # A fresh connection per request: reusing keep-alive connections that a server has
    # already timed out fails the next write ("Can not write request body"), and a new
    # loopback connection costs every server the same.
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_read=600))

