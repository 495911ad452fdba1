"""bench/engine_time.py reads the worker's engine counters the benchmarks report ("where llm-worker's time went")."""

import time

from bench import engine_time
from tests.helpers import openai_once, wait_idle


async def test_engine_time_over_a_request_is_the_worker_s_own_counters(http, base_url):
    await wait_idle(http, base_url)
    before = await engine_time.read(http, base_url)
    began = time.perf_counter()
    await openai_once(http, base_url + "/v1/completions", {"prompt": "Hello", "max_tokens": 6, "temperature": 0})
    after = await engine_time.read(http, base_url)
    spent = engine_time.EngineTime.between(before, after, time.perf_counter() - began)
    assert spent.steps >= 5  # a prefill step and a decode step per further token
    assert 0 < spent.decode_s < spent.step_s <= spent.wall_s
    assert 0 < spent.decode_share < 1 and spent.python_ms_per_step > 0
    assert spent.ms_per_step == spent.step_s / spent.steps * 1e3 > spent.decode_ms_per_step


async def test_a_server_without_the_counters_reads_as_none(http, base_url):
    assert await engine_time.read(http, base_url + "/v1") is None  # /v1/metrics: 404
