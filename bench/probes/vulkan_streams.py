"""Probe: does a server on a Vulkan device live through 8 streams of fast mode's layout (one KV stream per slot)?

The GPU check's fast-mode level, without the bench around it (issue: the lavapipe crash at 8 streams): one
"Request 1. ..." prompt answered, a one-token "Hello", then 8 prompts that share all but their number, at once,
8 tokens each. Prints each phase's status, seconds and SSE events, and whether the server is still alive; the
server's log is SERVER.log in the current folder.
Run: python bench/probes/vulkan_streams.py llm-worker|llama-server MODEL.gguf [SERVER FLAGS...]
     VULKAN_LIB: the Vulkan build's bin (default: scripts/build-llama-cpp vulkan's cached build, printed by it);
     PHASES=first,hello (what runs before the 8; default both); UNGUARDED=1: the worker without its lavapipe rule
     (worker/engine/native/device_faults.py), so `--flash-attn on` runs there. On lavapipe (Mesa 22.3), unguarded,
     llm-worker in fast mode with flash attention on dies in llama_decode (the fault is in lavapipe's queue thread);
     with `--flash-attn off` it runs through, as llama-server does with `--no-kv-unified -fa on`, and as it does on
     Mesa 25.0.7's lavapipe (bench/probes/RESULTS.md, "Vulkan on lavapipe: 8 streams").
"""
from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[2]
WORDS = "the river of a city runs past old stone bridges and green parks where people walk".split()
PORT = 8197
# The worker's command line with the lavapipe rule taken out: the model keeps the attention it planned.
UNGUARDED = ("import worker.engine.native.model as model; model.device_attention = lambda attention, *_: attention; "
             "from worker.cli import main; main()")


def vulkan_lib() -> str:
    return os.environ.get("VULKAN_LIB") or subprocess.run(
        [str(REPO / "scripts" / "build-llama-cpp"), "vulkan", "llama", "llama-server"], capture_output=True,
        text=True, check=True).stdout.strip().splitlines()[-1]


def server_command(kind: str, model: str, lib: str, flags: list[str]) -> list[str]:
    if kind == "llama-server":
        return [f"{lib}/llama-server", "-m", model, "--port", str(PORT), "-np", "8", "-c", "16384", "-t", "2",
                "-ngl", "999", *flags]
    entry = ["-c", UNGUARDED] if os.environ.get("UNGUARDED") else ["-m", "worker"]
    return [sys.executable, *entry, "serve", "--model", model, "--port", str(PORT), "--parallel", "8",
            "--ctx-size", "16384", "--threads", "2", "--backend", "vulkan", "--prefix-cache", "fast", *flags]


def prompt(number: int) -> str:
    filler = random.Random(1)
    return f"Request {number}. Read these notes. " + " ".join(filler.choice(WORDS) for _ in range(120))


async def complete(session: aiohttp.ClientSession, text: str, tokens: int) -> tuple[int, float, int]:
    start = time.time()
    body = {"prompt": text, "max_tokens": tokens, "temperature": 0, "stream": True}
    async with session.post(f"http://127.0.0.1:{PORT}/v1/completions", json=body) as response:
        events = (await response.text()).count("data:")
    return response.status, round(time.time() - start, 1), events


async def run(server: subprocess.Popen) -> None:
    timeout = aiohttp.ClientTimeout(total=1800)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(force_close=True)) as session:
        while True:
            if server.poll() is not None:
                print("the server died at startup")
                return
            try:
                async with session.get(f"http://127.0.0.1:{PORT}/health") as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(1)
        phases = os.environ.get("PHASES", "first,hello").split(",")
        if "first" in phases:
            print("first", await complete(session, prompt(1), 8), flush=True)
        if "hello" in phases:
            print("hello", await complete(session, "Hello", 1), flush=True)
        eight = await asyncio.gather(*(complete(session, prompt(n), 8) for n in range(3, 11)), return_exceptions=True)
        print("eight", eight, "alive" if server.poll() is None else f"DIED ({server.returncode})", flush=True)


def main() -> None:
    kind, model, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    lib = vulkan_lib()
    env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": "0", "LLAMA_CPP_LIB_PATH": lib}  # lavapipe is named, or left out
    with open(f"{kind}.log", "w") as log:
        server = subprocess.Popen(server_command(kind, model, lib, flags), stdout=log, stderr=subprocess.STDOUT,
                                  env=env, cwd=REPO)
        try:
            asyncio.run(run(server))
        finally:
            server.terminate()
            server.wait(60)


if __name__ == "__main__":
    main()
