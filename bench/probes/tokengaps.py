"""Probe: where a server's inter-token p99 under 8 clients comes from: every token's arrival, per request.

The throughput bench's 8-client level (bench/throughput.py --quick): 8 clients each send 2 streamed completions back
to back, ~128-token prompts of the bench's own (bench/prompts.py), 128 greedy tokens with end of text banned. The
server is started as the bench starts it (bench/servers.py: 8 slots, 8192 tokens of context, 2 threads, drafts off).
Prints the gaps' p50 and p99, when each request was sent and when its first token came, and the largest gaps with
when they ended and whose they were: what stalled the streams, and how often.

Run: .venv/bin/python bench/probes/tokengaps.py llm-worker|llama-server [--llama-server BIN] [--model GGUF]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.config import DRAFTS, LLAMA_SERVER, WORKER, BenchConfig, find_llama_server, find_model
from bench.prompts import PromptFactory
from bench.servers import running_server
from bench.throughput import percentile

CLIENTS, REQUESTS, PROMPT_TOKENS, TOKENS = 8, 2, 128, 128
Event = tuple[float, int, int, bool]  # (time, client, request, a token: else the request was sent)


async def client(url: str, prompts: list[str], index: int, no_eos: dict[str, float], events: list[Event]) -> None:
    for request, prompt in enumerate(prompts):
        body = {"prompt": prompt, "max_tokens": TOKENS, "temperature": 0, "seed": 1, "stream": True,
                "logit_bias": no_eos}
        events.append((time.perf_counter(), index, request, False))
        # A session a request, as the bench's client: llama-server closes idle keep-alive connections.
        async with aiohttp.ClientSession() as session, session.post(url + "/v1/completions", json=body) as response:
            async for line in response.content:
                if line.startswith(b"data: {") and b'"text":""' not in line:
                    events.append((time.perf_counter(), index, request, True))


def report(server: str, events: list[Event]) -> None:
    start = min(t for t, *_ in events)
    last: dict[tuple[int, int], float] = {}
    first: dict[tuple[int, int], float] = {}
    gaps = []  # (gap, when it ended, client, request)
    for t, index, request, token in sorted(events):
        if not token:
            continue
        key = (index, request)
        if key in last:
            gaps.append((t - last[key], t - start, index, request))
        else:
            first[key] = t - start
        last[key] = t
    ms = [gap * 1e3 for gap, *_ in gaps]
    print(f"{server}: {len(ms)} gaps, p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms, "
          f"longest {max(ms):.0f} ms")
    print("  sent at (s):       ", sorted(round(t - start, 2) for t, _, _, token in events if not token))
    print("  first tokens at (s):", sorted(round(t, 2) for t in first.values()))
    print("  the largest gaps (ms, ended at s, client, request):")
    for gap, ended, index, request in sorted(gaps, reverse=True)[:24]:
        print(f"    {gap * 1e3:6.0f}  {ended:6.2f}  c{index} r{request}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("server", choices=(WORKER, LLAMA_SERVER))
    p.add_argument("--llama-server")
    p.add_argument("--model")
    a = p.parse_args()
    cfg = BenchConfig(model=find_model(a.model), servers=(a.server,), prompt_lengths=(PROMPT_TOKENS,),
                      concurrencies=(CLIENTS,), requests_per_client=REQUESTS, level_timeout_s=0, max_tokens=TOKENS,
                      parallel=8, ctx_size=8192, threads=2, temperature=0.0, seed=0,
                      llama_server_bin=find_llama_server(a.llama_server) if a.server == LLAMA_SERVER else None,
                      out_dir=Path(tempfile.mkdtemp()), publish=False, worker_args=DRAFTS["off"][0],
                      peer_args=DRAFTS["off"][1])
    factory = PromptFactory(cfg.model)
    prompts = [[factory.prompt(PROMPT_TOKENS) for _ in range(REQUESTS)] for _ in range(CLIENTS)]
    no_eos = {str(token): -100.0 for token in factory.end_of_generation}
    events: list[Event] = []
    with running_server(a.server, cfg) as (url, _proc, _sampler, _startup_s, _argv):
        async def clients() -> None:
            await asyncio.gather(*(client(url, prompts[i], i, no_eos, events) for i in range(CLIENTS)))
        asyncio.run(clients())
    report(a.server, events)


if __name__ == "__main__":
    main()
