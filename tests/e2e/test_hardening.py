"""Hostile clients: fuzzed bodies, disconnect storms, and a leak check over thousands of requests."""

import asyncio
import http.client
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import WorkerProcess, start_worker
from worker.api.openapi import document

FIELDS = ["model", "messages", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
          "logit_bias", "stream", "stream_options", "n", "repeat_penalty", "presence_penalty", "job_id",
          "repetition_penalty", "tools", "max_completion_tokens", "echo"]


def _post_routes() -> dict[str, list[str]]:
    """Every POST route the worker documents (/openapi.json), with the fields its body schema names."""
    spec = document()
    schemas = spec["components"]["schemas"]

    def fields(schema: dict) -> set[str]:
        if "$ref" in schema:
            return fields(schemas[schema["$ref"].rsplit("/", 1)[1]])
        named = set(schema.get("properties", {}))
        for part in schema.get("allOf", []) + schema.get("anyOf", []) + schema.get("oneOf", []):
            named |= fields(part)
        return named

    routes = {path: sorted(fields(ops["post"].get("requestBody", {}).get("content", {}).get("application/json", {})
                                  .get("schema", {})))
              for path, ops in spec["paths"].items() if "post" in ops}
    slot = routes.pop("/slots/{id_slot}")
    return {**routes, **{f"/slots/0?action={action}": slot for action in ("save", "restore", "erase")}}


POST_ROUTES = _post_routes()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=12,
)


def bodies(fields: list[str]) -> st.SearchStrategy[dict]:
    """Bodies of the route's own fields and the generation fields, with any values, and keys of any text."""
    return st.dictionaries(st.sampled_from(sorted({*FIELDS, *fields})) | st.text(max_size=10), json_values,
                           max_size=8)


@pytest.fixture(scope="module")
def fuzz_worker(tmp_path_factory, model_path: Path):
    # Short timeouts so the rare valid body that starts a long generation ends quickly.
    # --embeddings and --slot-save-path: those routes read their bodies too.
    folder = tmp_path_factory.mktemp("fuzz")
    worker = start_worker(folder, "--model", str(model_path), "--parallel", "2", "--ctx-size", "1024",
                          "--request-timeout", "1", "--embeddings", "--slot-save-path", str(folder / "slots"))
    yield worker
    assert worker.stop() == 0


def post(worker: WorkerProcess, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
    host, port = worker.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def assert_answer_is_sound(status: int, payload: bytes) -> None:
    assert status < 500 or status in (503, 504), (status, payload[:300])
    if 400 <= status < 500 and status != 413:
        body = json.loads(payload)
        error = body.get("error")
        if isinstance(error, str):  # Ollama's shape: the message alone
            message = error
        else:
            message = error["message"] if error else body["errors"][0]["message"]
        assert message, body
    if status == 200 and payload.startswith(b"data: "):
        assert payload.rstrip().endswith(b"data: [DONE]")


def test_every_post_route_is_fuzzed():
    assert len(POST_ROUTES) >= 28 and {"/v1/chat/completions", "/v1/messages", "/api/chat", "/v1/responses",
                                       "/v1/embeddings", "/infill", "/slots/0?action=save"} <= POST_ROUTES.keys()


@pytest.mark.parametrize("path", POST_ROUTES)
def test_fuzzed_bodies_never_5xx(fuzz_worker, path):
    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(body=bodies(POST_ROUTES[path]))
    def check(body):
        status, payload = post(fuzz_worker, path, json.dumps(body).encode())
        assert_answer_is_sound(status, payload)

    check()


@pytest.mark.parametrize("body,content_type,completion_status", [
    (b'{"prompt": "a\\u0000b", "max_tokens": 1}', "application/json", 200),  # NUL is text like any other
    (b"\x00\x01\x02", "application/octet-stream", 400),
    (b"prompt=hi", "application/x-www-form-urlencoded", 400),
    (json.dumps({"prompt": "x", "max_tokens": 1, "stop": ["s"] * 10_000}).encode(), "application/json", 400),
    (json.dumps({"prompt": "x", "max_tokens": -5, "temperature": -1e308}).encode(), "application/json", 400),
    (b'{"prompt": "\xed\xa0\x80"}', "application/json", 400),  # a UTF-8-encoded lone surrogate
    (b"{" * 50_000, "application/json", 400),
])
def test_hand_written_hostile_bodies(fuzz_worker, body, content_type, completion_status):
    status, payload = post(fuzz_worker, "/v1/completions", body, content_type)
    assert status == completion_status, payload[:300]
    assert_answer_is_sound(status, payload)
    status, payload = post(fuzz_worker, "/execute", body, content_type)  # no job_id in any of them
    assert status == 400, payload[:300]
    assert_answer_is_sound(status, payload)


async def ready(http, base_url) -> dict:
    async with http.get(base_url + "/v1/ready") as response:
        return await response.json()


async def test_disconnect_storm_of_200_streams(http, base_url):
    rng = random.Random(200)

    async def open_and_drop(i: int) -> None:
        route, body = (("/execute", {"job_id": f"s{i}", "prompt": "Write a poem", "max_tokens": 300})
                       if i % 2 else
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Write a poem"}],
                                                 "max_tokens": 300, "stream": True}))
        await asyncio.sleep(rng.random() * 2)
        response = await http.post(base_url + route, json=body)
        for _ in range(rng.randint(0, 6)):
            await response.content.readline()
        response.close()

    await asyncio.gather(*(open_and_drop(i) for i in range(200)))
    for _ in range(100):
        state = await ready(http, base_url)
        if state["running"] == state["waiting"] == state["kv_cells_used"] == 0:
            break
        await asyncio.sleep(0.1)
    assert (state["running"], state["waiting"], state["kv_cells_used"]) == (0, 0, 0)
    async with http.post(base_url + "/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 3,
                                                            "temperature": 0}) as response:
        assert (await response.json())["choices"][0]["text"].startswith(" Paris")


def process_facts(pid: int) -> tuple[int, int, int]:
    """RSS in bytes, open file descriptors, threads."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return rss_kb * 1024, len(list(Path(f"/proc/{pid}/fd").iterdir())), len(list(Path(f"/proc/{pid}/task").iterdir()))


RSS_GROWTH_BOUND = 16 * 1024 * 1024


@pytest.mark.probe  # a soak: ~70 s on 2 cores (make test-probes)
async def test_no_leaks_over_2000_requests(http, worker):
    async def burst(n: int, offset: int) -> None:
        async def one(i: int) -> None:
            body = ({"prompt": f"Count: {i}", "max_tokens": 2, "stream": i % 2 == 0} if i % 3 else
                    {"job_id": f"leak-{i}", "prompt": f"Count: {i}", "max_tokens": 2})
            async with http.post(worker.url + ("/execute" if "job_id" in body else "/v1/completions"),
                                 json=body) as response:
                assert response.status == 200
                await response.read()

        for start in range(0, n, 8):
            await asyncio.gather(*(one(offset + start + k) for k in range(8)))

    await burst(200, 0)
    rss_200, fds_200, threads_200 = process_facts(worker.process.pid)
    await burst(1800, 200)
    rss_end, fds_end, threads_end = process_facts(worker.process.pid)
    assert rss_end - rss_200 < RSS_GROWTH_BOUND, (rss_200, rss_end)
    # Keep-alive sockets come and go, so descriptors may fall; they must not climb.
    assert fds_end <= fds_200 + 2 and threads_end <= threads_200


def test_escaped_lone_surrogate_is_400(fuzz_worker):
    status, payload = post(fuzz_worker, "/v1/completions", b'{"prompt": "\\ud800", "max_tokens": 1}')
    assert status == 400 and b"surrogate" in payload
