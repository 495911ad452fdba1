"""Bad input gets a 4xx naming every problem, never a 5xx."""

import pytest

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "Hi"}]


async def post_raw(http, url, data: bytes, content_type="application/json"):
    async with http.post(url, data=data, headers={"Content-Type": content_type}) as response:
        return response.status, await response.json()


@pytest.mark.parametrize("route", [CHAT, "/v1/completions", "/execute"])
@pytest.mark.parametrize("data", [
    b"{not json", b"", b"[1, 2]", b'"text"', b"\xff\xfe{}", b'{"max_tokens": NaN}',
    b"[" * 100_000 + b"]" * 100_000, b'{"prompt": "a\x00b"', b"null",
])
async def test_malformed_bodies_are_400(http, base_url, route, data):
    status, body = await post_raw(http, base_url + route, data)
    assert status == 400, body
    message = body["error"]["message"] if "error" in body else body["errors"][0]["message"]
    assert "body" in message or "JSON" in message


async def test_huge_body_is_413(http, base_url):
    async with http.post(base_url + CHAT, data=b"x" * (5 * 1024 * 1024)) as response:
        assert response.status == 413


async def test_openai_lists_every_problem(http, base_url):
    body = {"messages": "hi", "temperature": -1, "top_p": "high", "max_tokens": 0, "stop": [1],
            "logit_bias": {"abc": 5, "1": 500}, "seed": 1.5, "stream": "yes", "n": 9, "tools": [{"type": "function"}]}
    async with http.post(base_url + CHAT, json=body) as response:
        assert response.status == 400
        error = (await response.json())["error"]
    fields = {e["field"] for e in error["errors"]}
    assert fields == {"messages", "temperature", "top_p", "max_tokens", "stop", "logit_bias.abc", "logit_bias.1",
                      "seed", "stream", "n", "tools[0].function"}
    assert error["type"] == "invalid_request_error" and error["param"] == "messages"
    assert all(e["message"] in error["message"] for e in error["errors"])


@pytest.mark.parametrize("body,field", [
    ({"messages": HI, "temperature": 1e309}, "body"),  # JSON overflow to infinity: rejected by the parser
    ({"messages": HI, "max_tokens": 10**30}, "max_tokens"),
    ({"messages": HI, "presence_penalty": -3}, "presence_penalty"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"messages": [{"content": "no role"}]}, "messages[0].role"),
    ({"messages": [{"role": "", "content": "Hi"}]}, "messages[0].role"),  # once ran to the end of the context
    ({"messages": [{"role": "User", "content": "Hi"}]}, "messages[0].role"),
    ({"messages": ["Hi"]}, "messages[0]"),
    ({"messages": HI, "stream_options": {"include_usage": {}}}, "stream_options.include_usage"),
    # a digit to isdigit(), not to int(): was a 500
    ({"messages": HI, "logit_bias": {"\u00b2": 1}}, "logit_bias.\u00b2"),
    ({"messages": HI, "stream_options": []}, "stream_options"),
    ({"messages": HI, "top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
])
async def test_single_problems(http, base_url, body, field):
    async with http.post(base_url + CHAT, json=body) as response:
        text = await response.text()
        assert response.status == 400, text
        errors = (await response.json())["error"]["errors"]
    assert [e["field"] for e in errors] == [field]


async def test_another_model_is_404_as_openai_answers(http, base_url):
    async with http.post(base_url + CHAT, json={"messages": HI, "model": "gpt-4"}) as response:
        assert response.status == 404
        error = (await response.json())["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"


async def test_an_empty_prompt_is_refused_before_tokenizing(http, base_url):
    for prompt in ("", [""]):
        async with http.post(base_url + "/v1/completions", json={"prompt": prompt}) as response:
            assert response.status == 400
            error = (await response.json())["error"]
        assert error["param"] == "prompt" and error["errors"][0]["constraint"] == "1 <= len(prompt)"


async def test_roles_are_openai_roles_and_developer_is_system(http, base_url):
    roles = {role: {"role": role, "content": "Hi"} for role in ("system", "developer", "user", "assistant", "tool")}
    roles["tool"]["tool_call_id"] = "call_1"  # a tool message answers a call
    async with http.post(base_url + CHAT, json={"messages": list(roles.values()), "max_tokens": 1}) as response:
        assert response.status == 200, await response.text()
    prompt_tokens = {}
    for role in ("system", "developer"):
        async with http.post(base_url + CHAT, json={"messages": [roles[role], HI[0]], "max_tokens": 1}) as response:
            prompt_tokens[role] = (await response.json())["usage"]["prompt_tokens"]
    # SmolLM2's template adds its own system prompt when the first message is not "system": a developer
    # message it saw as "developer" would make the prompt longer.
    assert prompt_tokens["developer"] == prompt_tokens["system"]


async def test_execute_takes_null_stop_as_none_and_integral_floats_as_integers(http, base_url):
    body = {"job_id": "null-stop", "prompt": "Hi", "max_tokens": 2, "stop": None, "top_k": 1.0, "seed": 7.0}
    async with http.post(base_url + "/execute", json=body) as response:
        assert response.status == 200, await response.text()
        assert (await response.text()).rstrip().endswith("data: [DONE]")
    async with http.post(base_url + "/execute", json={**body, "top_k": 1.5}) as response:
        assert response.status == 400
        assert [e["field"] for e in (await response.json())["errors"]] == ["top_k"]


async def test_model_name_may_be_the_served_id_or_absent(http, base_url):
    for extra in ({}, {"model": "smollm2-135m-instruct"}):
        async with http.post(base_url + CHAT, json={"messages": HI, "max_tokens": 2, **extra}) as response:
            assert response.status == 200


async def test_text_parts_content_is_accepted(http, base_url):
    content = [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]
    async with http.post(base_url + CHAT, json={"messages": [{"role": "user", "content": content}],
                                                 "max_tokens": 2}) as response:
        assert response.status == 200


async def test_unknown_route_is_404(http, base_url):
    async with http.get(base_url + "/v1/nothing") as response:
        assert response.status == 404


async def test_oversized_prompt_is_refused_before_tokenizing(http, base_url):
    # 2048 tokens a request: over 32 characters a token cannot fit, whatever the tokenizer says.
    for route, body in [("/v1/completions", {"prompt": "a" * 70_000}),
                        (CHAT, {"messages": [{"role": "user", "content": "a" * 40_000}] * 2})]:
        async with http.post(base_url + route, json=body) as response:
            assert response.status == 400
            error = (await response.json())["error"]
        assert error["code"] == "context_length_exceeded" and "at most 65536 characters" in error["message"]
