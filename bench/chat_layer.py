#!/usr/bin/env python3
"""The chat layer's cost on the time to first token of a ~2k-token chat.

One llm-worker on the default model (--parallel 1, no host-memory cache) answers a ~2k-token multi-turn chat with
max_tokens 1, ROUNDS times, through /v1/chat/completions (the template rendered by llama.cpp's chat layer, the answer
read by its parser) and the same prompt's text through /v1/completions (neither), alternating which goes first, each
prompt new (a nonce at its start) so that no cache answers it. The median TTFTs' ratio is what the chat layer adds
to the first token; target (issue #81): at most 2 %. That ratio is within the machine's noise, so the chat layer's
own part is timed too: /apply-template on the same chat (the render alone, HTTP included), against the TTFT. What it
costs a streamed token is bench/probes/answerreader.py's.
Run: .venv/bin/python bench/run.py chat_layer [--publish]   (bench/CHAT-LAYER.md)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.config import WORKER, add_worker_flags, worker_config
from bench.report import environment, machine_line, write_report
from bench.servers import running_server

SENTENCE = ("The harbour office opens at six, and every vessel that arrives after dark is logged by the pilot on duty "
            "before its crew goes ashore. ")
ROUNDS = 7
CHAT, TEXT, RENDER = "/v1/chat/completions", "/v1/completions", "/apply-template"


def long_chat(nonce: str) -> list[dict[str, str]]:
    """A ~2k-token multi-turn chat, new from its first tokens (`nonce`)."""
    turns = [{"role": "system", "content": f"Session {nonce}. You answer questions about the harbour's rules."}]
    for k in range(12):
        turns.append({"role": "user", "content": f"Question {k}: " + SENTENCE * 3})
        turns.append({"role": "assistant", "content": f"Answer {k}: " + SENTENCE * 3})
    turns.append({"role": "user", "content": "And the last rule?"})
    return turns


async def first_token_s(session: aiohttp.ClientSession, url: str, body: dict) -> float:
    started = time.perf_counter()
    async with session.post(url, json={**body, "max_tokens": 1, "temperature": 0, "stream": True}) as r:
        r.raise_for_status()
        async for line in r.content:  # the first chunk after a chat's opening one (its role) holds the token
            if line.startswith(b"data: {") and b'"role":"assistant"' not in line:
                elapsed = time.perf_counter() - started
                break
        async for _ in r.content:
            pass
    return elapsed


async def measure(url: str) -> tuple[dict[str, float], int]:
    """Median TTFT of each route, and the prompt's tokens."""
    times: dict[str, list[float]] = {CHAT: [], TEXT: [], RENDER: []}
    async with aiohttp.ClientSession() as session:
        for round_ in range(ROUNDS + 1):  # round 0 warms both routes
            order = (CHAT, TEXT) if round_ % 2 else (TEXT, CHAT)  # neither always meets a busier machine
            for path in order:
                messages = long_chat(f"{round_}{path}")  # each prompt new: no cache answers it
                started = time.perf_counter()
                async with session.post(url + RENDER, json={"messages": messages}) as r:
                    prompt = (await r.json())["prompt"]
                if round_:
                    times[RENDER].append(time.perf_counter() - started)
                body = {"messages": messages} if path == CHAT else {"prompt": prompt}
                elapsed = await first_token_s(session, url + path, body)
                if round_:
                    times[path].append(elapsed)
        async with session.post(url + "/tokenize", json={"content": prompt, "add_special": True}) as r:
            prompt_tokens = len((await r.json())["tokens"])
    return {path: statistics.median(each) * 1e3 for path, each in times.items()}, prompt_tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_worker_flags(p, parallel=1, ctx_size=4096)
    p.add_argument("--publish", action="store_true", help="also write bench/CHAT-LAYER.md")
    args = p.parse_args(argv)
    cfg = worker_config(args, 1, "--cache-ram", "0", "--spec-type", "none")
    env = environment(cfg)
    with running_server(WORKER, cfg) as (url, *_):
        ttft, prompt_tokens = asyncio.run(measure(url))
    added = (ttft[CHAT] / ttft[TEXT] - 1) * 100
    text = "\n".join([
        "# The chat layer's cost on the first token", "",
        "`.venv/bin/python bench/run.py chat_layer --publish` (bench/chat_layer.py). Target of issue #81: at most "
        "2 % on a 2k-token chat's first token.", "",
        machine_line(cfg, env), f"- llm-worker --parallel 1 --cache-ram 0 --spec-type none; median of {ROUNDS} "
        "rounds, the two routes alternated, each prompt new", "",
        f"| a {prompt_tokens}-token chat, max_tokens 1 | ms to the first token (the render: its answer) |",
        "|---|---:|",
        f"| {CHAT}: rendered by llama.cpp's chat layer, read by its parser | {ttft[CHAT]:.1f} |",
        f"| {TEXT}: the same prompt's text | {ttft[TEXT]:.1f} |",
        f"| {RENDER} on the same chat: the chat layer's render alone, HTTP included | {ttft[RENDER]:.1f} |", "",
        f"Chat against text: **{added:+.1f} %**, within the noise of a shared 2-core machine; the render itself is "
        f"**{100 * ttft[RENDER] / ttft[CHAT]:.2f} %** of the chat's first token.", ""])
    write_report(text, cfg.out_dir, "chat_layer.md", "CHAT-LAYER.md" if args.publish else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
