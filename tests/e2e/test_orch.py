"""The pool-manager contract: health, readiness, /execute events and stop reasons, /cancel."""

import asyncio
import json
import time

from tests.helpers import execute, sse_events

JOB = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}


async def test_health_and_ready(http, base_url):
    for path in ("/health", "/v1/health"):
        async with http.get(base_url + path) as response:
            assert response.status == 200
            body = await response.json()
            assert body["status"] == "healthy" and body["vram_bytes"] == 0
            # What exact mode chose and measured at load, on this build and the test model
            # (docs/cache-and-exactness.md).
            assert body["exactness"] == {
                "prefix_cache": "exact", "library": "batch-invariant", "ggml_batch_invariant": True,
                "flash_attn": "on", "cache_type_k": "f16", "cache_type_v": "f16",
                "attention_pinned": True, "attention_workaround": None,
                "tiled_mm": True, "repack": True, "decoded_cells_exact": True, "batch_invariant": True,
                "moved_cells_exact": True, "answers_reused": True, "speculative": "ngram", "drafts_keep_text": True,
                "memory": "anywhere", "rollback_tokens": 0}
    async with http.get(base_url + "/v1/ready") as response:
        body = await response.json()
    assert body["ready"] is True and body["model_loaded"] is True and body["state"] in ("idle", "busy")


async def test_execute_stream_shape_and_max_tokens(http, base_url):
    # Arrival times of each event: the client's own clock, to hold the reported decode time against.
    arrivals: list[float] = []
    events = []
    sent = time.monotonic()
    async with http.post(base_url + "/execute", json={**JOB, "job_id": "shape"}) as response:
        async for line in response.content:
            if line.startswith(b"data: "):
                arrivals.append(time.monotonic())
                payload = line[len(b"data: "):].strip()
                events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    assert events[0]["type"] == "started" and events[0]["job_id"] == "shape"
    assert events[0]["model"] == "smollm2-135m-instruct" and events[0]["started_at"].endswith("Z")
    tokens = [e for e in events if isinstance(e, dict) and e["type"] == "token"]
    assert [t["i"] for t in tokens] == list(range(len(tokens)))
    metrics, end, done = events[-3:]
    assert metrics["type"] == "metrics" and metrics["tokens_per_sec"] > 0
    assert set(end) == {"type", "tokens_out", "prompt_tokens_cached", "decode_time_ms", "draft_tokens",
                        "draft_accepted_tokens", "stop_reason"}
    # --spec-type auto drafts by prompt lookup here; a drafted token is counted once, and kept or not
    assert 0 <= end["draft_accepted_tokens"] <= end["draft_tokens"], end
    assert (end["type"], end["tokens_out"], end["stop_reason"], done) == ("end", 16, "MAX_TOKENS", "[DONE]")
    # Decoding (first token to last) fits inside the whole request, and spans about what the client saw
    # between the first and last token events (which may each carry several tokens).
    first_token = arrivals[events.index(tokens[0])]
    last_token = arrivals[events.index(tokens[-1])]
    assert 0 < end["decode_time_ms"] <= (arrivals[-1] - sent) * 1e3
    assert end["decode_time_ms"] >= 0.5 * (last_token - first_token) * 1e3 - 20, (end, last_token - first_token)
    # tokens_per_sec is the other side of the same measurement: 15 gaps over the decode time.
    assert abs(metrics["tokens_per_sec"] - 15 / (end["decode_time_ms"] / 1e3)) <= 0.02 * metrics["tokens_per_sec"] + 0.1


async def test_execute_text_equals_the_completion_route(http, base_url):
    events = await execute(http, base_url, {**JOB, "job_id": "same", "max_tokens": 64})
    text = "".join(e["t"] for e in events if isinstance(e, dict) and e["type"] == "token")
    async with http.post(base_url + "/v1/completions", json={**JOB, "max_tokens": 64}) as response:
        assert text == (await response.json())["choices"][0]["text"]


async def test_execute_eos(http, base_url):
    # the model's own system prompt: without it, the greedy answer to this question ran past 200 tokens on the
    # batch-invariant build
    prompt = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n")
    events = await execute(http, base_url, {"job_id": "eos", "prompt": prompt, "max_tokens": 200, "temperature": 0})
    assert events[-2]["stop_reason"] == "EOS" and events[-2]["tokens_out"] < 200


async def test_execute_stop_sequence(http, base_url):
    events = await execute(http, base_url, {**JOB, "job_id": "stop", "max_tokens": 100, "stop": [","]})
    end = events[-2]
    assert end["stop_reason"] == "STOP_SEQUENCE" and end["stop_sequence_matched"] == ","
    assert "," not in "".join(e["t"] for e in events if isinstance(e, dict) and e["type"] == "token")


async def test_cancel_ends_the_stream_with_cancelled(http, base_url):
    async with http.post(base_url + "/execute", json={**JOB, "job_id": "c1", "max_tokens": 1000}) as response:
        first = await response.content.readline()
        assert json.loads(first.decode()[len("data: "):])["type"] == "started"
        for _ in range(2):
            async with http.post(base_url + "/cancel", json={"job_id": "c1"}) as cancel:
                assert cancel.status == 202
        events = await sse_events(response)
    assert events[-2]["type"] == "end" and events[-2]["stop_reason"] == "CANCELLED"
    assert events[-2]["tokens_out"] < 1000 and events[-1] == "[DONE]"


async def test_cancel_unknown_job_is_still_202(http, base_url):
    async with http.post(base_url + "/cancel", json={"job_id": "never-ran"}) as response:
        assert response.status == 202


async def test_execute_lists_every_problem(http, base_url):
    body = {"job_id": "", "prompt": "", "max_tokens": 0, "temperature": 3, "top_p": -1, "top_k": -1, "min_p": 2,
            "repetition_penalty": 5, "stop": ["a", "b", "c", "d", "e"], "seed": -1}
    async with http.post(base_url + "/execute", json=body) as response:
        assert response.status == 400
        errors = (await response.json())["errors"]
    fields = {e["field"] for e in errors}
    assert fields == {"job_id", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p",
                      "repetition_penalty", "stop", "seed"}
    top_p = next(e for e in errors if e["field"] == "top_p")
    assert top_p["constraint"] == "0 <= top_p <= 1" and top_p["value"] == -1 and top_p["message"]


async def test_execute_limits_and_unknown_fields(http, base_url):
    cases = [
        ({"job_id": "x", "prompt": "a" * 32769, "max_tokens": 1}, "prompt"),
        ({"job_id": "x", "prompt": "a", "max_tokens": 2049}, "max_tokens"),
        ({"job_id": "x", "prompt": "a", "max_tokens": 1, "stop": ["x" * 101]}, "stop"),
        ({"prompt": "a", "max_tokens": 1}, "job_id"),
    ]
    for body, field in cases:
        async with http.post(base_url + "/execute", json=body) as response:
            assert response.status == 400
            assert [e["field"] for e in (await response.json())["errors"]] == [field]
    events = await execute(http, base_url, {**JOB, "job_id": "extra", "max_tokens": 2, "colour": "blue"})
    assert events[-2]["tokens_out"] == 2


async def test_execute_context_exceeded(http, base_url):
    job = {"job_id": "long", "prompt": "hello " * 2000, "max_tokens": 100}
    async with http.post(base_url + "/execute", json=job) as r:
        assert r.status == 400
        error = (await r.json())["errors"][0]
    assert error["code"] == "context_length_exceeded" and error["field"] == "prompt"


async def test_duplicate_running_job_id_is_refused(http, base_url):
    async with http.post(base_url + "/execute", json={**JOB, "job_id": "dup", "max_tokens": 500}) as first:
        await first.content.readline()
        async with http.post(base_url + "/execute", json={**JOB, "job_id": "dup"}) as second:
            assert second.status == 400
            assert (await second.json())["errors"][0]["field"] == "job_id"
        async with http.post(base_url + "/cancel", json={"job_id": "dup"}):
            pass
        await sse_events(first)


async def test_v1_inference_alias(http, base_url):
    async with http.post(base_url + "/v1/inference", json={**JOB, "job_id": "alias", "max_tokens": 3}) as response:
        events = await sse_events(response)
    assert events[-2]["tokens_out"] == 3


async def test_disconnect_frees_the_slot(http, base_url):
    """Clients that vanish mid-stream free their slot and KV cells at once; the next request is normal."""
    for route, body in [("/execute", {**JOB, "job_id": "gone", "max_tokens": 1000}),
                        ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 1000, "stream": True})]:
        response = await http.post(base_url + route, json=body)
        for _ in range(4):
            await response.content.readline()
        response.close()  # drop the connection mid-stream
    for _ in range(50):
        async with http.get(base_url + "/v1/ready") as r:
            ready = await r.json()
        if ready["running"] == 0 and ready["kv_cells_used"] == 0:
            break
        await asyncio.sleep(0.1)
    assert (ready["running"], ready["waiting"], ready["kv_cells_used"], ready["state"]) == (0, 0, 0, "idle")
    events = await execute(http, base_url, {**JOB, "job_id": "after"})
    assert events[-2]["stop_reason"] == "MAX_TOKENS"
