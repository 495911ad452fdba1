"""Claims of docs/api.md and docs/operations.md that had no test: request ids, token limits, prompt forms, /cancel."""

import json
import re

from tests.helpers import completion_text, execute, openai_once, ready_state, sse_events, wait_idle

STORY = {"prompt": "Once upon a time", "temperature": 0}


async def test_x_request_id_is_echoed_or_made_and_logged(http, worker):
    cases = [("/v1/completions", {**STORY, "max_tokens": 2}),
             ("/v1/completions", {**STORY, "max_tokens": 2, "stream": True}),
             ("/execute", {**STORY, "job_id": "traced", "max_tokens": 2}),
             ("/v1/completions", {"max_tokens": 0})]  # refused with 400: errors carry the id too
    for i, (route, body) in enumerate(cases):
        given = f"trace-{i}-abc"
        async with http.post(worker.url + route, json=body, headers={"X-Request-Id": given}) as response:
            await response.read()
            assert response.headers["X-Request-Id"] == given, (route, body)
    made = set()
    for _ in range(2):
        async with http.post(worker.url + "/v1/completions", json={**STORY, "max_tokens": 1}) as response:
            made.add(response.headers["X-Request-Id"])
    assert len(made) == 2 and all(re.fullmatch(r"[0-9a-f]{16}", request_id) for request_id in made)
    # The id ties the worker's log lines to the request: its request_done line carries it.
    done = [json.loads(line) for line in worker.log().splitlines() if '"request_done"' in line]
    assert {"trace-0-abc", "trace-1-abc", "trace-2-abc"} <= {line.get("request_id") for line in done}


async def test_max_completion_tokens_limits_both_routes(http, base_url):
    completion = await openai_once(http, base_url + "/v1/completions", {**STORY, "max_completion_tokens": 5})
    chat = await openai_once(http, base_url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Tell me a long story."}], "temperature": 0,
        "max_completion_tokens": 4})
    assert (completion["usage"]["completion_tokens"], completion["choices"][0]["finish_reason"]) == (5, "length")
    assert (chat["usage"]["completion_tokens"], chat["choices"][0]["finish_reason"]) == (4, "length")
    # Both given: max_tokens, the older name, wins.
    both = await openai_once(http, base_url + "/v1/completions",
                             {**STORY, "max_tokens": 3, "max_completion_tokens": 6})
    assert both["usage"]["completion_tokens"] == 3


async def test_a_prompt_may_be_a_list_of_one_string(http, base_url):
    text = completion_text(await openai_once(http, base_url + "/v1/completions", {**STORY, "max_tokens": 12}))
    listed = await openai_once(http, base_url + "/v1/completions",
                               {**STORY, "prompt": [STORY["prompt"]], "max_tokens": 12})
    assert completion_text(listed) == text
    two = {**STORY, "prompt": ["a", "b"], "max_tokens": 1}  # a batch of prompts is not supported
    async with http.post(base_url + "/v1/completions", json=two) as response:
        assert response.status == 400
        assert [e["field"] for e in (await response.json())["error"]["errors"]] == ["prompt"]


async def test_cancel_frees_the_slot_and_its_kv_cells(http, base_url):
    await wait_idle(http, base_url)
    async with http.post(base_url + "/execute", json={**STORY, "job_id": "freed", "max_tokens": 1000}) as response:
        for _ in range(6):  # started, then tokens: the job holds a slot and KV cells
            await response.content.readline()
        busy = await ready_state(http, base_url)
        assert busy["running"] == 1 and busy["kv_cells_used"] > 0
        async with http.post(base_url + "/cancel", json={"job_id": "freed"}) as cancel:
            assert (await cancel.json())["status"] == "cancelling"
        events = await sse_events(response)
    assert events[-2]["stop_reason"] == "CANCELLED"
    after = await ready_state(http, base_url)  # read at once: cancelling frees the slot, not some later sweep
    assert (after["running"], after["kv_cells_used"]) == (0, 0)


async def test_cancel_ends_a_job_still_queued(http, base_url):
    await wait_idle(http, base_url)
    slots = (await ready_state(http, base_url))["slots"]
    running = [await http.post(base_url + "/execute", json={**STORY, "job_id": f"hold-{i}", "max_tokens": 1000})
               for i in range(slots)]
    try:
        for response in running:
            for _ in range(3):  # started, then a token: the job holds a slot
                await response.content.readline()
        async with http.post(base_url + "/execute", json={**STORY, "job_id": "queued", "max_tokens": 1000}) as queued:
            await queued.content.readline()  # started: submitted, waiting for a slot
            state = await ready_state(http, base_url)
            assert (state["running"], state["waiting"]) == (slots, 1)
            async with http.post(base_url + "/cancel", json={"job_id": "queued"}) as cancel:
                assert (await cancel.json())["status"] == "cancelling"
            events = await sse_events(queued)
        assert events[-2]["stop_reason"] == "CANCELLED" and events[-2]["tokens_out"] == 0
        state = await ready_state(http, base_url)
        assert (state["running"], state["waiting"]) == (slots, 0)  # the others were not touched
    finally:
        for i, response in enumerate(running):
            async with http.post(base_url + "/cancel", json={"job_id": f"hold-{i}"}):
                pass
            await sse_events(response)
    assert (await wait_idle(http, base_url))["running"] == 0
    events = await execute(http, base_url, {**STORY, "job_id": "after-queue", "max_tokens": 3})
    assert events[-2]["stop_reason"] == "MAX_TOKENS"
