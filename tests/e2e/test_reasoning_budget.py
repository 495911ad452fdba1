"""Reasoning budgets: the end-of-thinking marker written once a thinking model's reasoning has spent its tokens.

The test model does not think on its own, so it is served with a template that opens <think> in the prompt (as
tests/e2e/test_reasoning.py does): asked for a story, it writes one inside the reasoning and never closes it.
"""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest

from tests.conftest import template_worker
from tests.e2e.test_reasoning import THINKING_TEMPLATE

DEFAULT_BUDGET = 24  # the models.toml entry's
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
MARKER = 3  # tokens the marker and a token's text may add to a budget when the reasoning is tokenized back


@pytest.fixture(scope="module")
def thinker(model_path: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = template_worker(tmp_path_factory.mktemp("budget"), model_path, "thinker", THINKING_TEMPLATE,
                             "--parallel", "2",
                             entry=f"[models.thinker.sampling]\nreasoning_budget = {DEFAULT_BUDGET}\n")
    yield worker
    worker.stop()


async def tokens(http, url: str, text: str) -> int:
    async with http.post(url + "/tokenize", json={"content": text}) as response:
        return len((await response.json())["tokens"])


async def post(http, url: str, body: dict) -> tuple[int, dict]:
    async with http.post(url, json=body) as response:
        return response.status, await response.json()


async def test_anthropic_thinking_budget_ends_the_reasoning(thinker, http):
    client = anthropic.AsyncAnthropic(base_url=thinker.url, api_key="unused", max_retries=0)
    answer = await client.messages.create(model="thinker", messages=STORY, max_tokens=1100,
                                          extra_body={"temperature": 0},
                                          thinking={"type": "enabled", "budget_tokens": 1024})
    kinds = [block.type for block in answer.content]
    assert kinds[0] == "thinking" and "text" in kinds, kinds
    thought = await tokens(http, thinker.url, answer.content[0].thinking)
    assert 1024 - MARKER <= thought <= 1024 + MARKER
    assert answer.usage.output_tokens > thought  # the answer followed the marker


async def test_the_models_toml_budget_and_a_requests_own(thinker, http):
    client = openai.AsyncOpenAI(base_url=thinker.url + "/v1", api_key="unused", max_retries=0)
    for extra, budget in [({}, DEFAULT_BUDGET), ({"extra_body": {"reasoning_budget": 8}}, 8),
                          ({"reasoning_effort": "none"}, 0)]:
        answer = await client.chat.completions.create(model="thinker", messages=STORY, max_tokens=60, temperature=0,
                                                **extra)
        message = answer.choices[0].message
        reasoning = (message.model_extra or {}).get("reasoning_content") or ""
        assert (await tokens(http, thinker.url, reasoning) if reasoning else 0) <= budget + MARKER, extra
        assert message.content, extra  # an answer after the marker
        assert "</think>" not in message.content


async def test_responses_reasoning_effort_is_a_budget(thinker, http):
    client = openai.AsyncOpenAI(base_url=thinker.url + "/v1", api_key="unused", max_retries=0)
    answer = await client.responses.create(model="thinker", input=STORY, max_output_tokens=320, temperature=0,
                                     reasoning={"effort": "minimal"})
    assert [item.type for item in answer.output] == ["reasoning", "message"]
    assert await tokens(http, thinker.url, answer.output[0].content[0].text) <= 256 + MARKER
    assert 256 <= answer.usage.output_tokens_details.reasoning_tokens <= 256 + MARKER
    assert answer.output_text


@pytest.mark.parametrize("route,body,field", [
    ("/v1/messages", {"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1000}},
     "thinking.budget_tokens"),
    ("/v1/messages", {"max_tokens": 1024, "thinking": {"type": "enabled", "budget_tokens": 1024}},
     "thinking.budget_tokens"),
    ("/v1/messages", {"max_tokens": 8, "thinking": {"type": "sometimes"}}, "thinking"),
    ("/v1/chat/completions", {"reasoning_effort": "huge"}, "reasoning_effort"),
    ("/v1/chat/completions", {"reasoning_effort": "low", "reasoning_budget": 5}, "reasoning_effort"),
    ("/v1/chat/completions", {"reasoning_budget": -1}, "reasoning_budget"),
    ("/v1/responses", {"reasoning": {"effort": "huge"}}, "reasoning.effort"),
])
async def test_bad_budgets_are_400_in_each_apis_family(thinker, http, route, body, field):
    ask = {"input": STORY} if route == "/v1/responses" else {"messages": STORY}
    status, answer = await post(http, thinker.url + route, {"model": "thinker", **ask, **body})
    assert status == 400, answer
    error = answer["error"]
    assert field in [problem["field"] for problem in error["errors"]]
    assert error["type"] == "invalid_request_error"


async def test_a_budget_on_completions_or_thinking_on_a_model_that_does_not_think_is_400(base_url, http):
    status, answer = await post(http, base_url + "/v1/completions", {"prompt": "Hi", "reasoning_budget": 4})
    assert status == 400 and answer["error"]["param"] == "reasoning_budget"
    status, answer = await post(http, base_url + "/v1/messages", {
        "messages": STORY, "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert status == 400 and "does not think" in answer["error"]["message"]
