"""Many requests at once: drop storms, backpressure, and the Prometheus metrics."""

import asyncio
import random

from tests.conftest import start_worker
from tests.helpers import openai_once


async def ready_state(http, base_url) -> dict:
    async with http.get(base_url + "/v1/ready") as response:
        return await response.json()


async def wait_idle(http, base_url) -> dict:
    for _ in range(100):
        ready = await ready_state(http, base_url)
        if ready["running"] == ready["waiting"] == ready["kv_cells_used"] == 0:
            break
        await asyncio.sleep(0.1)
    return ready


async def test_fifty_streams_dropped_midway_leave_nothing_behind(http, base_url):
    rng = random.Random(50)

    async def open_and_drop(i: int) -> None:
        route, body = (("/execute", {"job_id": f"storm-{i}", "prompt": "Tell me a story", "max_tokens": 500})
                       if i % 2 else ("/v1/completions", {"prompt": "Tell me a story", "max_tokens": 500, "stream": True}))
        response = await http.post(base_url + route, json=body)
        for _ in range(rng.randint(1, 4)):
            await response.content.readline()
        response.close()

    await asyncio.gather(*(open_and_drop(i) for i in range(50)))
    ready = await wait_idle(http, base_url)
    assert (ready["running"], ready["waiting"], ready["kv_cells_used"], ready["state"]) == (0, 0, 0, "idle")
    body = await openai_once(http, base_url + "/v1/completions", {"prompt": "Hello", "max_tokens": 5, "temperature": 0})
    assert body["usage"]["completion_tokens"] == 5


async def test_metrics_are_exposed_and_move(http, base_url):
    async def scrape() -> str:
        async with http.get(base_url + "/metrics") as response:
            assert response.status == 200 and response.content_type == "text/plain"
            return await response.text()

    def value(text: str, name: str) -> float:
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")
                   or line.startswith(name + "{"))

    before = await scrape()
    await openai_once(http, base_url + "/v1/completions", {"prompt": "Hello", "max_tokens": 6, "temperature": 0})
    after = await scrape()
    for name in ("llm_worker_time_to_first_token_seconds_bucket", "llm_worker_inter_token_latency_seconds_bucket",
                 "llm_worker_request_duration_seconds_bucket", "llm_worker_queue_time_seconds_bucket",
                 "llm_worker_requests_running", "llm_worker_requests_waiting", "llm_worker_slots",
                 "llm_worker_kv_cache_usage_ratio", "llm_worker_engine_steps_total",
                 "llm_worker_engine_step_seconds_total", "llm_worker_engine_decode_seconds_total"):
        assert name in after
    assert value(after, "llm_worker_generated_tokens_total") - value(before, "llm_worker_generated_tokens_total") == 6
    assert value(after, "llm_worker_prompt_tokens_total") - value(before, "llm_worker_prompt_tokens_total") == 1
    assert 'llm_worker_requests_total{finish_reason="length"}' in after
    assert value(after, "llm_worker_slots") == 4
    steps = value(after, "llm_worker_engine_steps_total") - value(before, "llm_worker_engine_steps_total")
    assert steps >= 5  # a prefill step, a decode step per further token (the last may still be counting)
    step_s = value(after, "llm_worker_engine_step_seconds_total")
    assert 0 < value(after, "llm_worker_engine_decode_seconds_total") < step_s


async def test_full_queue_is_503_with_retry_after(http, tmp_path, model_path):
    worker = start_worker(tmp_path, "--model", str(model_path), "--parallel", "1", "--max-queue", "1",
                          "--ctx-size", "1024")
    try:
        long = {"prompt": "Once upon a time", "max_tokens": 400, "stream": True}
        running = await http.post(worker.url + "/v1/completions", json=long)
        await running.content.readline()
        waiting = await http.post(worker.url + "/v1/completions", json=long)
        async with http.post(worker.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}) as refused:
            assert refused.status == 503 and refused.headers["Retry-After"] == "1"
            assert (await refused.json())["error"]["code"] == "queue_full"
        async with http.post(worker.url + "/execute", json={"job_id": "q", "prompt": "x", "max_tokens": 1}) as refused:
            assert refused.status == 503
            text = await refused.text()
        assert '"type":"error"' in text and text.rstrip().endswith("data: [DONE]")
        running.close()
        waiting.close()
    finally:
        # Off the event loop: the client sockets above only really close once the loop runs again.
        assert await asyncio.to_thread(worker.stop) == 0
