"""Shared by the tests of every tier: small clients for the worker's two APIs, a fresh interpreter, the presets'
CMake flags."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from tests.conftest import REPO

if TYPE_CHECKING:
    import anthropic

# The whole distribution: no top-k, top-p or min-p, which a model's sampling defaults add (its models.toml entry's, its
# GGUF's, llama-server's). For tests whose seeds were chosen to draw freely.
WHOLE_DISTRIBUTION = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}


async def sse_events(response: aiohttp.ClientResponse) -> list[Any]:
    """Every `data:` payload of a stream, JSON-decoded, with the final "[DONE]" kept as a string."""
    events = []
    async for raw in response.content:
        line = raw.decode("utf-8").strip()
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


@dataclass
class Streamed:
    pieces: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict | None = None
    events: list[Any] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


async def openai_stream(http: aiohttp.ClientSession, url: str, body: dict) -> Streamed:
    async with http.post(url, json={**body, "stream": True}) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = await sse_events(response)
    assert events[-1] == "[DONE]"
    out = Streamed(events=events)
    for event in events[:-1]:
        assert "error" not in event, event
        if event.get("usage"):
            out.usage = event["usage"]
        for choice in event["choices"]:
            piece = choice.get("text") if "text" in choice else choice["delta"].get("content")
            if piece:
                out.pieces.append(piece)
            out.finish_reason = choice["finish_reason"] or out.finish_reason
    return out


async def ask_chat(http: aiohttp.ClientSession, url: str, messages: list[dict], **fields: Any) -> tuple[int, dict]:
    """A greedy chat of 12 tokens at most (unless `fields` say otherwise): its status and its JSON body."""
    body = {"messages": messages, "max_tokens": 12, "temperature": 0, **fields}
    async with http.post(url + "/v1/chat/completions", json=body) as response:
        return response.status, await response.json()


async def openai_once(http: aiohttp.ClientSession, url: str, body: dict) -> dict:
    async with http.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def completion_text(result: dict) -> str:
    choice = result["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


async def execute(http: aiohttp.ClientSession, base_url: str, body: dict) -> list[Any]:
    async with http.post(base_url + "/execute", json=body) as response:
        assert response.status == 200, await response.text()
        return await sse_events(response)


async def ready_state(http: aiohttp.ClientSession, base_url: str) -> dict:
    async with http.get(base_url + "/v1/ready") as response:
        return await response.json()


async def wait_idle(http: aiohttp.ClientSession, base_url: str) -> dict:
    """/v1/ready once no request runs, waits or holds KV cells (about 10 s at most)."""
    for _ in range(100):
        ready = await ready_state(http, base_url)
        if ready["running"] == ready["waiting"] == ready["kv_cells_used"] == 0:
            break
        await asyncio.sleep(0.1)
    return ready


def run_python(code: str) -> subprocess.CompletedProcess:
    """`python -c code` in the repository: what a fresh interpreter imports and logs."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


# What each preset must hand to CMake, inheritance resolved, in order.
EXPECTED_CMAKE_ARGS = {
    "cpu": ["-DGGML_NATIVE=OFF"],
    "cpu-native": ["-DGGML_NATIVE=ON"],
    "openblas": ["-DGGML_NATIVE=OFF", "-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"],
    "cuda": ["-DGGML_NATIVE=OFF", "-DGGML_CUDA=ON"],
    "metal": ["-DGGML_METAL=ON", "-DGGML_METAL_EMBED_LIBRARY=ON"],
    "vulkan": ["-DGGML_NATIVE=OFF", "-DGGML_VULKAN=ON"],
    "rpc": ["-DGGML_RPC=ON"],
}


def counts_its_input(client: anthropic.Anthropic, model: str, **extra: object) -> None:
    """count_tokens of a request is the input its answer reports, whole and streamed."""
    messages = [{"role": "user", "content": "Tell me about owls, in one line."},
                {"role": "assistant", "content": "Owls"}]  # a prefill is part of the input too
    counted = client.messages.count_tokens(model=model, messages=messages, **extra)
    greedy = {"extra_body": {"temperature": 0}}
    answer = client.messages.create(model=model, messages=messages, max_tokens=4, **extra, **greedy)
    usage = answer.usage
    assert counted.input_tokens > 10
    assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens
    with client.messages.stream(model=model, messages=messages, max_tokens=4, **extra, **greedy) as stream:
        started = next(event for event in stream if event.type == "message_start")
        assert started.message.usage.input_tokens == counted.input_tokens
