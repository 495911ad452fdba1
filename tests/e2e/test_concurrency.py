"""Many requests at once: drop storms, backpressure, and the Prometheus metrics."""

import asyncio
import random

from tests.conftest import start_worker
from tests.helpers import openai_once, wait_idle


async def test_fifty_streams_dropped_midway_leave_nothing_behind(http, base_url):
    rng = random.Random(50)

    async def open_and_drop(i: int) -> None:
        route, body = (("/execute", {"job_id": f"storm-{i}", "prompt": "Tell me a story", "max_tokens": 500})
                       if i % 2 else
                       ("/v1/completions", {"prompt": "Tell me a story", "max_tokens": 500, "stream": True}))
        response = await http.post(base_url + route, json=body)
        for _ in range(rng.randint(1, 4)):
            await response.content.readline()
        response.close()

    await asyncio.gather(*(open_and_drop(i) for i in range(50)))
    ready = await wait_idle(http, base_url)
    assert (ready["running"], ready["waiting"], ready["kv_cells_used"], ready["state"]) == (0, 0, 0, "idle")
    body = await openai_once(http, base_url + "/v1/completions", {"prompt": "Hello", "max_tokens": 5, "temperature": 0})
    assert body["usage"]["completion_tokens"] == 5


async def scrape(http, base_url) -> str:
    async with http.get(base_url + "/metrics") as response:
        assert response.status == 200 and response.content_type == "text/plain"
        return await response.text()


def value(text: str, name: str) -> float:
    """The sample `name` (a full sample name with its labels, or without: every label set summed)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + " ") or (not name.endswith("}") and line.startswith(name + "{")))


def moved(before: str, after: str, name: str) -> float:
    return value(after, name) - value(before, name)


async def test_metrics_are_exposed_and_move(http, base_url):
    await wait_idle(http, base_url)  # no request of an earlier test may finish inside the window
    before = await scrape(http, base_url)
    await openai_once(http, base_url + "/v1/completions", {"prompt": "Hello", "max_tokens": 6, "temperature": 0})
    after = await scrape(http, base_url)
    # One request: one observation in each per-request histogram, its +Inf bucket included.
    for histogram in ("llm_worker_time_to_first_token_seconds", "llm_worker_request_duration_seconds",
                      "llm_worker_queue_time_seconds"):
        assert moved(before, after, histogram + "_count") == 1, histogram
        assert moved(before, after, histogram + '_bucket{le="+Inf"}') == 1, histogram
        assert 0 < moved(before, after, histogram + "_sum") < 60, histogram
    # Six tokens come out as at most six pieces: up to five gaps between them.
    assert 1 <= moved(before, after, "llm_worker_inter_token_latency_seconds_count") <= 5
    for name in ("llm_worker_requests_running", "llm_worker_requests_waiting", "llm_worker_kv_cache_usage_ratio"):
        assert name + " " in after
    assert moved(before, after, "llm_worker_generated_tokens_total") == 6
    assert moved(before, after, "llm_worker_prompt_tokens_total") == 1
    assert moved(before, after, 'llm_worker_requests_total{finish_reason="length"}') == 1
    assert value(after, "llm_worker_slots") == 4
    steps = moved(before, after, "llm_worker_engine_steps_total")
    assert steps >= 5  # a prefill step, a decode step per further token (the last may still be counting)
    step_s = value(after, "llm_worker_engine_step_seconds_total")
    assert 0 < value(after, "llm_worker_engine_decode_seconds_total") < step_s


async def test_requests_total_counts_each_finish_reason(http, base_url):
    await wait_idle(http, base_url)
    before = await scrape(http, base_url)
    chat = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 200, "temperature": 0}
    assert (await openai_once(http, base_url + "/v1/chat/completions", chat))["choices"][0]["finish_reason"] == "stop"
    stopped = await openai_once(http, base_url + "/v1/completions",
                                {"prompt": "Once upon a time", "max_tokens": 100, "temperature": 0, "stop": [","]})
    assert stopped["choices"][0]["finish_reason"] == "stop"
    job = {"job_id": "counted", "prompt": "Once upon a time", "max_tokens": 1000}
    async with http.post(base_url + "/execute", json=job) as cancelled:
        await cancelled.content.readline()
        async with http.post(base_url + "/cancel", json={"job_id": "counted"}):
            pass
        await cancelled.read()
    dropped = await http.post(base_url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 1000, "stream": True})
    await dropped.content.readline()
    dropped.close()
    await wait_idle(http, base_url)
    after = await scrape(http, base_url)
    counts = {reason: moved(before, after, f'llm_worker_requests_total{{finish_reason="{reason}"}}')
              for reason in ("eos", "stop", "length", "cancelled", "client_disconnected")}
    assert counts == {"eos": 1, "stop": 1, "length": 0, "cancelled": 1, "client_disconnected": 1}



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


async def test_the_gauges_cluster_routers_read_move_with_the_load(http, base_url):
    """GIE's endpoint picker reads vllm:num_requests_waiting, vllm:num_requests_running and vllm:kv_cache_usage_perc
    (a fraction): idle they are 0, with six long streams on four slots 4, 2 and above 0, and 0 again after."""
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    await wait_idle(http, base_url)
    assert [value(await scrape(http, base_url), name) for name in names] == [0, 0, 0]
    # End-of-text banned (the test model's <|endoftext|> and <|im_end|>): every stream runs until it is closed.
    body = {"prompt": "Tell me a long story", "max_tokens": 400, "stream": True, "logit_bias": {"0": -100, "2": -100}}
    streams = [await http.post(base_url + "/v1/completions", json=body) for _ in range(6)]
    try:
        loaded = None
        for _ in range(600):  # until every slot holds a stream and two wait: a state, not a timing
            text = await scrape(http, base_url)
            if (value(text, names[0]), value(text, names[1])) == (4, 2) and value(text, names[2]) > 0:
                loaded = text
                break
            await asyncio.sleep(0.1)
        assert loaded is not None, text
        assert value(loaded, names[2]) == value(loaded, "llm_worker_kv_cache_usage_ratio") < 1
        assert value(loaded, "llamacpp:requests_processing") == 4
    finally:
        for stream in streams:
            stream.close()
    await wait_idle(http, base_url)
    assert [value(await scrape(http, base_url), name) for name in names] == [0, 0, 0]
