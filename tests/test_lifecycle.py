"""Life under a pool manager: ready callback, heartbeat, auth, progress, drain, timeouts, OpenAPI."""

import asyncio
import json
import signal
import socket
import time

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import WorkerProcess, start_worker, wait_healthy
from tests.helpers import sse_events

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class FakeManager:
    """A real HTTP server that records what the worker sends; it can fail the first N callbacks."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.callbacks: list[tuple[dict, dict, int]] = []  # body, headers, the worker's /health status then
        self.heartbeats: list[dict] = []
        self.attempts = 0
        self.url = ""

    async def ready(self, request: web.Request) -> web.Response:
        self.attempts += 1
        if self.attempts <= self.fail_first:
            return web.Response(status=503)
        body = await request.json()
        async with aiohttp.ClientSession() as session, session.get(body["url"] + "/health") as health:
            self.callbacks.append((body, dict(request.headers), health.status))
        return web.json_response({"ok": True})

    async def heartbeat(self, request: web.Request) -> web.Response:
        self.heartbeats.append(await request.json())
        return web.json_response({"ok": True})

    async def __aenter__(self) -> "FakeManager":
        app = web.Application()
        app.router.add_post("/v1/workers/ready", self.ready)
        app.router.add_post("/v1/heartbeat", self.heartbeat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self._runner.cleanup()


async def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


async def stop_async(worker: WorkerProcess) -> int:
    return await asyncio.to_thread(worker.stop)


@pytest.fixture
async def managed(tmp_path, model_path):
    """A worker under a fake manager that fails its first two callbacks, with a bearer token."""
    async with FakeManager(fail_first=2) as manager:
        worker = await asyncio.to_thread(
            start_worker, tmp_path, "--model", str(model_path), "--parallel", "2", "--ctx-size", "2048",
            "--worker-id", "w-1", "--model-ref", "ref/q4", "--callback-url", manager.url + "/v1/workers/ready",
            "--heartbeat-url", manager.url + "/v1/heartbeat", "--heartbeat-interval", "0.2",
            "--drain-timeout", "20", env={"LLORCH_API_TOKEN": TOKEN})
        try:
            yield manager, worker
        finally:
            await stop_async(worker)


async def test_ready_callback_once_after_health_with_body_and_token(managed):
    manager, worker = managed
    await wait_for(lambda: manager.callbacks)
    await asyncio.sleep(0.5)
    assert len(manager.callbacks) == 1 and manager.attempts == 3  # two 503s retried, then taken
    body, headers, health_then = manager.callbacks[0]
    assert health_then == 200
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert body == {"worker_id": "w-1", "url": worker.url, "uri": worker.url, "model_ref": "ref/q4",
                    "backend": "cpu", "device": 0, "vram_bytes": 0, "memory_bytes": body["memory_bytes"]}
    assert body["memory_bytes"] > 90_000_000


async def test_heartbeats_carry_the_contract_body(managed):
    manager, worker = managed
    await wait_for(lambda: len(manager.heartbeats) >= 3)
    beat = manager.heartbeats[-1]
    port = int(worker.url.rsplit(":", 1)[1])
    assert beat["worker"] == {"id": "w-1", "model_id": beat["worker"]["model_id"], "device": 0, "port": port,
                              "status": "idle", "implementation": "llm-worker", "version": "0.1.0"}
    assert beat["timestamp"].endswith("Z")


async def test_auth_guards_everything_but_health(managed, http):
    _, worker = managed
    async with http.get(worker.url + "/health") as response:
        assert response.status == 200
    for path in ("/v1/models", "/v1/ready", "/metrics", "/openapi.json"):
        async with http.get(worker.url + path) as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "MISSING_API_KEY"
        async with http.get(worker.url + path, headers={"Authorization": "Bearer wrong"}) as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "INVALID_API_KEY"
        async with http.get(worker.url + path, headers=AUTH) as response:
            assert response.status == 200
    async with http.post(worker.url + "/execute", json={"job_id": "a", "prompt": "x", "max_tokens": 1}) as response:
        assert response.status == 401


async def test_sigterm_drains_streams_then_exits_zero(managed, http):
    manager, worker = managed
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
    short = await http.post(worker.url + "/execute", json={**body, "job_id": "short"}, headers=AUTH)
    endless = await http.post(worker.url + "/v1/completions", json={**body, "max_tokens": 1000, "stream": True},
                              headers=AUTH)
    assert short.status == endless.status == 200
    await short.content.readline()
    await endless.content.readline()
    worker.process.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.3)
    async with http.post(worker.url + "/v1/completions", json=body, headers=AUTH) as refused:
        assert refused.status == 503 and refused.headers["Retry-After"]
    async with http.get(worker.url + "/v1/ready", headers=AUTH) as ready:
        assert (await ready.json())["state"] == "draining"
    short_events = await sse_events(short)
    assert short_events[-2]["stop_reason"] == "MAX_TOKENS" and short_events[-1] == "[DONE]"
    endless_events = await sse_events(endless)  # cut by the drain timeout or finished: either way it ends cleanly
    assert endless_events[-1] == "[DONE]"
    assert await asyncio.to_thread(worker.process.wait, 60) == 0
    assert manager.heartbeats[-1]["worker"]["status"] == "draining"


async def test_loading_progress_stream(tmp_path, model_path, http):
    worker = await asyncio.to_thread(start_worker, tmp_path, "--model", str(model_path), "--parallel", "1",
                                     "--ctx-size", "512", wait=False)
    try:
        events = None
        for _ in range(200):
            try:
                async with http.get(worker.url + "/v1/loading/progress") as response:
                    events = await sse_events(response)
                break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.02)
        assert events is not None and events[-1] == "[DONE]"
        stages = [e["stage"] for e in events[:-1]]
        assert stages == sorted(stages, key=["download", "convert", "quantize", "load", "warmup"].index)
        assert events[-2] == {"stage": "warmup", "done": 1, "total": 1}
        await asyncio.to_thread(wait_healthy, worker)
    finally:
        await stop_async(worker)


async def test_request_timeout_ends_with_timeout(tmp_path, model_path, http):
    worker = await asyncio.to_thread(start_worker, tmp_path, "--model", str(model_path), "--parallel", "1",
                                     "--ctx-size", "2048", "--request-timeout", "0.5")
    try:
        job = {"job_id": "slow", "prompt": "Once upon a time", "max_tokens": 2000}
        async with http.post(worker.url + "/execute", json=job) as response:
            events = await sse_events(response)
        assert events[-2]["type"] == "error" and events[-2]["code"] == "TIMEOUT" and events[-1] == "[DONE]"
        async with http.post(worker.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 1900}) as response:
            assert response.status == 504
            assert (await response.json())["error"]["code"] == "timeout"
    finally:
        await stop_async(worker)


async def test_a_stalled_reader_does_not_stall_others(base_url, http):
    async def timed_completion() -> float:
        started = time.monotonic()
        async with http.post(base_url + "/v1/completions",
                             json={"prompt": "Hello", "max_tokens": 16, "temperature": 0}) as response:
            assert response.status == 200
            assert (await response.json())["usage"]["completion_tokens"] == 16
        return time.monotonic() - started

    alone = await timed_completion()
    host, port = base_url.removeprefix("http://").split(":")
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1500, "stream": True})
    stalled = socket.create_connection((host, int(port)))
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    try:
        await asyncio.sleep(1)  # long enough for the stalled stream to fill its socket buffers
        beside = await timed_completion()
        # Sharing the batch with one more sequence costs a little; waiting on a socket would cost everything.
        assert beside < 3 * alone + 2, (alone, beside)
    finally:
        stalled.close()


async def test_openapi_document_matches_the_routes():
    from worker.api import WorkerState, build_app
    from worker.api.openapi import document
    from worker.settings import Settings

    app = build_app(WorkerState(Settings(model=None, model_ref=None, worker_id="w"), model_id="m"))
    served = {(route.method.lower(), route.resource.canonical) for route in app.router.routes()
              if route.method != "HEAD"}
    documented = {(method, path) for path, item in document()["paths"].items() for method in item}
    assert served == documented
