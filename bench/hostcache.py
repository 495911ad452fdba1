#!/usr/bin/env python3
"""Host memory under load: clients that never read their streams, round after round; does --cache-ram hold?

CLIENTS clients each open a streamed completion of a new ~PROMPT-token document and never read a byte of it,
round after round, on a worker with --cache-ram MIB. Each new prompt takes a slot holding an earlier one, whose
cells go to host memory (as designed: its conversation may come back), so the host cache grows every round until
it reaches its bound, then holds it, dropping the oldest.
After each round (the engine idle again, the unread connections still open) the report reads
llm_worker_cache_ram_bytes, the bound, and the worker's RSS. Run: .venv/bin/python bench/run.py hostcache
[--cache-ram 256] [--rounds 5]   (docs/operations.md, "Memory")
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.client import new_session
from bench.config import MB, WORKER, add_worker_flags, worker_config
from bench.prompts import PromptFactory
from bench.report import environment, machine_line, write_report
from bench.servers import process_tree_rss, running_server


async def unread_stream(port: int, prompt: str, answer: int) -> asyncio.StreamWriter:
    """Send a streamed completion and never read its answer: the open connection, to close later."""
    body = json.dumps({"prompt": prompt, "max_tokens": answer, "temperature": 0, "stream": True}).encode()
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    return writer


async def engine_idle(url: str) -> dict[str, float]:
    """Once no request runs or waits: the worker's cache_ram gauges."""
    async with new_session() as session:
        while True:
            async with session.get(url + "/v1/ready") as response:
                ready = await response.json()
            if ready["running"] == ready["waiting"] == 0:
                break
            await asyncio.sleep(0.2)
        async with session.get(url + "/metrics") as response:
            text = await response.text()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("llm_worker_cache_ram")}


async def rounds(url: str, pid: int, prompts: PromptFactory, args: argparse.Namespace) -> list[str]:
    port, rows = int(url.rsplit(":", 1)[1]), []
    for n in range(1, args.rounds + 1):
        writers = [await unread_stream(port, prompts.prompt(args.prompt_tokens), args.answer)
                   for _ in range(args.clients)]
        gauges = await engine_idle(url)
        rows.append(f"| {n} | {gauges['llm_worker_cache_ram_bytes'] / MB:.1f} | "
                    f"{gauges['llm_worker_cache_ram_limit_bytes'] / MB:.0f} | {process_tree_rss(pid) / MB:.0f} |")
        print(rows[-1], file=sys.stderr)  # as it goes: a round takes a minute or more on 2 cores
        for writer in writers:
            writer.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_worker_flags(p)
    p.add_argument("--cache-ram", type=int, default=256, help="the worker's --cache-ram, MiB")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--prompt-tokens", type=int, default=400)
    p.add_argument("--answer", type=int, default=32)
    args = p.parse_args(argv)
    cfg = worker_config(args, args.answer, "--cache-ram", str(args.cache_ram))
    prompts = PromptFactory(cfg.model)
    env = environment(cfg)
    with running_server(WORKER, cfg) as (url, proc, _sampler, _start_s, _argv):
        rows = asyncio.run(rounds(url, proc.pid, prompts, args))
    text = "\n".join([
        "# llm-worker host memory under unread streams", "", machine_line(cfg, env),
        f"- {cfg.parallel} slots, {cfg.ctx_size} tokens of context, --cache-ram {args.cache_ram}; each round "
        f"{args.clients} clients send a new {args.prompt_tokens}-token prompt ({args.answer} tokens answered) and "
        "never read the stream", "",
        "| round | host cache MiB | bound MiB | worker RSS MiB |", "|---|---|---|---|", *rows]) + "\n"
    write_report(text, args.out, "hostcache.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
