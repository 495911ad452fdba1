"""Life under a pool manager: ready callback, heartbeat, auth, progress, drain, timeouts."""

import asyncio
import itertools
import json
import signal
import socket
import time
from datetime import datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import WorkerProcess, start_worker, wait_healthy
from tests.helpers import sse_events

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DRAIN_TIMEOUT_S = 3.0  # the managed worker's: far shorter than a 1000-token generation


class FakeManager:
    """A real HTTP server that records what the worker sends; it can fail the first N callbacks."""

    def __init__(self, fail_first: int = 0, fail_status: int = 503) -> None:
        self.fail_first, self.fail_status = fail_first, fail_status
        self.callbacks: list[tuple[dict, dict, int]] = []  # body, headers, the worker's /health status then
        self.heartbeats: list[dict] = []
        self.attempts = 0
        self.url = ""

    async def ready(self, request: web.Request) -> web.Response:
        self.attempts += 1
        if self.attempts <= self.fail_first:
            return web.Response(status=self.fail_status)
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
            start_worker, tmp_path, "--model", str(model_path), "--parallel", "3", "--ctx-size", "3072",
            "--worker-id", "w-1", "--model-ref", "ref/q4", "--callback-url", manager.url + "/v1/workers/ready",
            "--heartbeat-url", manager.url + "/v1/heartbeat", "--heartbeat-interval", "0.2",
            "--drain-timeout", str(DRAIN_TIMEOUT_S), env={"LLORCH_API_TOKEN": TOKEN})
        try:
            yield manager, worker
        finally:
            await stop_async(worker)


async def test_ready_callback_once_after_health_with_body_and_token(managed, model_path):
    manager, worker = managed
    await wait_for(lambda: manager.callbacks)
    await asyncio.sleep(0.5)
    assert len(manager.callbacks) == 1 and manager.attempts == 3  # two 503s retried, then taken
    body, headers, health_then = manager.callbacks[0]
    assert health_then == 200
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert body == {"worker_id": "w-1", "url": worker.url, "uri": worker.url, "model_ref": "ref/q4",
                    "backend": "cpu", "device": 0, "vram_bytes": 0, "memory_bytes": body["memory_bytes"],
                    "cache_ram_limit_bytes": 8192 << 20, "cache_ram_bytes": 0}  # --cache-ram's default, nothing held
    # The weights llama.cpp holds: the GGUF file less its header and vocabulary, a few percent.
    file_bytes = model_path.stat().st_size
    assert 0.9 * file_bytes < body["memory_bytes"] < file_bytes


async def test_heartbeats_carry_the_contract_body(managed, model_path, http):
    manager, worker = managed
    await wait_for(lambda: len(manager.heartbeats) >= 3)
    beat = manager.heartbeats[-1]
    port = int(worker.url.rsplit(":", 1)[1])
    async with http.get(worker.url + "/v1/models", headers=AUTH) as response:
        served = [m["id"] for m in (await response.json())["data"]]
    assert served == [model_path.stem]  # a model given by path is served under its file's stem
    assert beat["worker"] == {"id": "w-1", "model_id": model_path.stem, "device": 0, "port": port,
                              "status": "idle", "implementation": "llm-worker", "version": "0.1.0"}
    stamp = datetime.fromisoformat(beat["timestamp"].removesuffix("Z") + "+00:00")
    assert beat["timestamp"].endswith("Z") and abs(time.time() - stamp.timestamp()) < 10


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


async def test_sigterm_drains_streams_then_cancels_at_the_timeout(managed, http):
    manager, worker = managed
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
    long = {**body, "max_tokens": 1000}  # ~10 s even alone: outlives the drain timeout
    short = await http.post(worker.url + "/execute", json={**body, "job_id": "short"}, headers=AUTH)
    endless = await http.post(worker.url + "/execute", json={**long, "job_id": "endless"}, headers=AUTH)
    endless_openai = await http.post(worker.url + "/v1/completions", json={**long, "stream": True}, headers=AUTH)
    assert short.status == endless.status == endless_openai.status == 200
    for response in (short, endless, endless_openai):
        await response.content.readline()
    worker.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    await asyncio.sleep(0.3)
    async with http.post(worker.url + "/v1/completions", json=body, headers=AUTH) as refused:
        assert refused.status == 503 and refused.headers["Retry-After"]
    async with http.get(worker.url + "/v1/ready", headers=AUTH) as ready:
        assert (await ready.json())["state"] == "draining"
    short_events = await sse_events(short)
    assert short_events[-2]["stop_reason"] == "MAX_TOKENS" and short_events[-1] == "[DONE]"
    endless_events = await sse_events(endless)
    cut_after = time.monotonic() - signalled
    assert endless_events[-2]["stop_reason"] == "CANCELLED" and endless_events[-1] == "[DONE]"
    assert 0 < endless_events[-2]["tokens_out"] < 1000
    assert DRAIN_TIMEOUT_S - 0.5 < cut_after < DRAIN_TIMEOUT_S + 10, cut_after
    openai_events = await sse_events(endless_openai)
    assert openai_events[-2]["error"]["code"] == "cancelled" and openai_events[-1] == "[DONE]"
    assert await asyncio.to_thread(worker.process.wait, 60) == 0
    assert manager.heartbeats[-1]["worker"]["status"] == "draining"


async def test_health_is_503_loading_and_progress_streams_while_loading(tmp_path, model_path, http):
    worker = await asyncio.to_thread(start_worker, tmp_path, "--model", str(model_path), "--parallel", "1",
                                     "--ctx-size", "512", wait=False)
    try:
        first_health = None
        for _ in range(1000):
            try:
                async with http.get(worker.url + "/health") as response:
                    first_health = response.status, await response.json()
                break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.01)
        # The worker binds before it loads, so the first answer it ever gives is "loading".
        assert first_health == (503, {"status": "loading"})
        async with http.get(worker.url + "/v1/loading/progress") as response:
            events = await sse_events(response)
        assert events[-1] == "[DONE]" and events[-2] == {"stage": "warmup", "done": 1, "total": 1}
        progress = events[:-1]
        stages = [e["stage"] for e in progress]
        assert stages == sorted(stages, key=["download", "convert", "quantize", "load", "warmup"].index)
        # Joined while loading: it saw work in progress, not only the end, and counts never go back.
        assert len(progress) > 1 and any(e["done"] < e["total"] for e in progress), progress
        for earlier, later in itertools.pairwise(progress):
            assert earlier["stage"] != later["stage"] or earlier["done"] < later["done"], progress
        await asyncio.to_thread(wait_healthy, worker)
    finally:
        await stop_async(worker)



async def test_a_4xx_callback_is_final_and_5xx_retries_stop_at_the_callback_timeout(tmp_path, model_path, http):
    callback_timeout_s = 2.0
    async with FakeManager(fail_first=10**6, fail_status=400) as refusing, FakeManager(fail_first=10**6) as down:
        workers = await asyncio.gather(*(asyncio.to_thread(
            start_worker, tmp_path, "--model", str(model_path), "--parallel", "1", "--ctx-size", "512",
            "--callback-url", manager.url + "/v1/workers/ready", "--callback-timeout", str(callback_timeout_s))
            for manager in (refusing, down)))
        try:
            await wait_for(lambda: '"ready_callback_refused"' in workers[0].log()
                           and '"ready_callback_gave_up"' in workers[1].log(), timeout=callback_timeout_s + 10)
            given_up_at = down.attempts
            await asyncio.sleep(2)  # a backoff step past the timeout: a worker still retrying would call again
            assert refusing.attempts == 1  # a 4xx is the manager's answer, not a failure to retry
            assert down.attempts == given_up_at >= 3  # retried with backoff, then gave up
            for worker in workers:  # either way the worker keeps serving
                async with http.get(worker.url + "/health") as response:
                    assert response.status == 200
        finally:
            await asyncio.gather(*(stop_async(worker) for worker in workers))


async def _until_draining(http, url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async with http.get(url + "/v1/ready") as ready:
            if (await ready.json()).get("state") == "draining":
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not draining {timeout} s after the signal")


async def test_sigint_drains_and_a_second_signal_exits_at_once(tmp_path, model_path, http):
    worker = await asyncio.to_thread(start_worker, tmp_path, "--model", str(model_path), "--parallel", "1",
                                     "--ctx-size", "2048", "--drain-timeout", "120")
    try:
        job = {"job_id": "long", "prompt": "Once upon a time", "max_tokens": 1500, "temperature": 0}
        stream = await http.post(worker.url + "/execute", json=job)
        await stream.content.readline()  # started
        worker.process.send_signal(signal.SIGINT)
        await _until_draining(http, worker.url)  # the signal is handled on the worker's loop: not at once under load
        async with http.post(worker.url + "/execute", json={**job, "job_id": "late"}) as refused:
            assert refused.status == 503 and refused.headers["Retry-After"] == "1"
            assert (await refused.json())["errors"][0]["code"] == "not_ready"
        async with http.get(worker.url + "/v1/ready") as ready:
            assert (await ready.json())["state"] == "draining"
        # Draining, not dying: the admitted job still streams tokens.
        for _ in range(3):
            line = await stream.content.readline()
            if line.startswith(b"data: "):
                assert json.loads(line[len(b"data: "):])["type"] == "token"
        assert worker.process.poll() is None
        second = time.monotonic()
        worker.process.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(worker.process.wait, 10) == 1
        assert time.monotonic() - second < 5  # not the 120 s drain timeout
        assert '"second_signal_exiting_now"' in worker.log()
        stream.close()
    finally:
        await stop_async(worker)


def test_a_crash_in_native_code_says_what_killed_the_worker(tmp_path, model_path):
    """llama.cpp and the GPU's driver run in the worker's process: a segfault there (lavapipe's, once) ended it
    without a line in its log. Python's fault handler now writes the signal and the threads' stacks first."""
    worker = start_worker(tmp_path, "--model", str(model_path), "--parallel", "1", "--ctx-size", "512")
    worker.process.send_signal(signal.SIGSEGV)
    assert worker.process.wait(60) == -signal.SIGSEGV
    log = worker.log()
    assert "Fatal Python error: Segmentation fault" in log and "most recent call first" in log, log[-2000:]


async def test_request_timeout_ends_with_timeout(tmp_path, model_path, http):
    worker = await asyncio.to_thread(start_worker, tmp_path, "--model", str(model_path), "--parallel", "1",
                                     "--ctx-size", "2048", "--request-timeout", "0.5")
    try:
        # Greedy: a sampled story may end with EOS inside the 0.5 s and never reach the timeout.
        job = {"job_id": "slow", "prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0}
        async with http.post(worker.url + "/execute", json=job) as response:
            events = await sse_events(response)
        assert events[-2]["type"] == "error" and events[-2]["code"] == "TIMEOUT" and events[-1] == "[DONE]"
        async with http.post(worker.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 1900,
                                                                  "temperature": 0}) as response:
            assert response.status == 504
            assert (await response.json())["error"]["code"] == "timeout"
    finally:
        await stop_async(worker)


def tcp_queues(local_port: int, remote_port: int) -> tuple[int, int]:
    """(send queue, receive queue) in bytes of the loopback TCP socket local_port -> remote_port."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)) == (local_port, remote_port):
            tx, rx = fields[4].split(":")
            return int(tx, 16), int(rx, 16)
    raise AssertionError(f"no socket {local_port} -> {remote_port}")


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) * 1024


async def test_a_stalled_reader_does_not_stall_others(worker, http):
    async def timed_completion() -> float:
        started = time.monotonic()
        async with http.post(worker.url + "/v1/completions",
                             json={"prompt": "Hello", "max_tokens": 16, "temperature": 0}) as response:
            assert response.status == 200
            assert (await response.json())["usage"]["completion_tokens"] == 16
        return time.monotonic() - started

    alone = await timed_completion()
    rss_before = rss_bytes(worker.process.pid)
    host, port = worker.url.removeprefix("http://").split(":")
    # ~200 bytes an event, 1000 events, EOS banned: far more than the client's receive buffer holds.
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000, "stream": True, "temperature": 0,
                       "logit_bias": {"0": -100, "2": -100}})
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect, so the window stays small
    stalled.connect((host, int(port)))
    stalled.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    client_port = stalled.getsockname()[1]
    try:
        # Stalled: the client's receive buffer is full and stays full (its window is shut) while what the
        # worker writes piles up unsent in the worker's socket. (Linux grows a send buffer up to
        # net.ipv4.tcp_wmem's 4 MiB, more than one stream makes: the pile, not a blocked write, is the test.)
        deadline, received_before = time.monotonic() + 60, None
        while True:
            unsent, received = tcp_queues(int(port), client_port)[0], tcp_queues(client_port, int(port))[1]
            if unsent >= 64 * 1024 and received == received_before:
                break
            assert time.monotonic() < deadline, f"the stream never stalled: {unsent} bytes unsent"
            received_before = received
            await asyncio.sleep(0.5)
        async with http.get(worker.url + "/v1/ready") as response:
            assert (await response.json())["running"] == 1  # still generating for the stalled reader
        beside = await timed_completion()
        # Sharing the batch with one more sequence costs a little; waiting on a socket would cost everything.
        assert beside < 3 * alone + 2, (alone, beside)
        # The worker's own memory stays flat: what waits for the reader is a few hundred KB of events.
        assert rss_bytes(worker.process.pid) - rss_before < 32 * 1024 * 1024
        # Once read, the stalled stream turns out whole: nothing was dropped to get past it.
        stalled.settimeout(120)
        received = b""
        while not received.endswith(b"\r\n0\r\n\r\n") and (chunk := stalled.recv(1 << 16)):  # the last chunk
            received += chunk
        assert b'"finish_reason":"length"' in received and b"data: [DONE]" in received
    finally:
        stalled.close()
