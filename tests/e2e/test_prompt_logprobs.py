"""Prompt logprobs on /v1/completions (echo + logprobs, max_tokens 0 or more), as lm-eval's loglikelihood asks."""

from __future__ import annotations

import math

import openai
import pytest

MODEL = "smollm2-135m-instruct"
PROMPT = "The three primary colors are"


@pytest.fixture
def client(base_url):
    return openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)


async def test_prompt_logprobs_equal_the_ones_its_tokens_get_when_generated(client):
    """Prefilled rows score the prompt as one-by-one decoding scored the same tokens when it generated them."""
    generated = await client.completions.create(model=MODEL, prompt=PROMPT, temperature=0, max_tokens=24,
                                                logprobs=5)
    made = generated.choices[0].logprobs
    scored = await client.completions.create(model=MODEL, prompt=PROMPT + generated.choices[0].text, echo=True,
                                             logprobs=5, max_tokens=0, temperature=0)
    choice = scored.choices[0]
    assert choice.text == PROMPT + generated.choices[0].text and choice.finish_reason == "length"
    echoed = choice.logprobs
    assert echoed.token_logprobs[0] is None and echoed.top_logprobs[0] is None
    assert "".join(echoed.tokens) == choice.text
    assert echoed.text_offset == [sum(len(t) for t in echoed.tokens[:i]) for i in range(len(echoed.tokens))]
    n = len(made.tokens)
    assert echoed.tokens[-n:] == made.tokens  # the answer's text tokenizes back into the tokens it was made of
    assert echoed.token_logprobs[-n:] == pytest.approx(made.token_logprobs, abs=1e-3)
    for mine, theirs in zip(echoed.top_logprobs[-n:], made.top_logprobs):
        assert mine.keys() == theirs.keys()
        assert list(mine.values()) == pytest.approx(list(theirs.values()), abs=1e-3)
    assert all(v <= 0 for v in echoed.token_logprobs[1:])
    assert scored.usage.completion_tokens == 0 and scored.usage.prompt_tokens == len(echoed.tokens)
    assert scored.usage.prompt_tokens_details.cached_tokens == 0  # cached cells have no logits: prefilled whole


async def test_scores_lead_a_generated_answer_streamed_and_not(client):
    ask = dict(model=MODEL, prompt=PROMPT, echo=True, logprobs=2, max_tokens=6, temperature=0)
    answer = await client.completions.create(**ask)
    whole = answer.choices[0]
    plain = (await client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0)).choices[0]
    assert whole.text == PROMPT + plain.text
    assert len(whole.logprobs.tokens) == answer.usage.prompt_tokens + 6
    assert whole.logprobs.token_logprobs[0] is None and None not in whole.logprobs.token_logprobs[1:]
    text, tokens, logprobs, offsets = "", [], [], []
    async for chunk in await client.completions.create(**ask, stream=True):
        for part in chunk.choices:
            text += part.text
            if part.logprobs is not None:
                tokens += part.logprobs.tokens
                logprobs += part.logprobs.token_logprobs
                offsets += part.logprobs.text_offset
    assert (text, tokens, logprobs, offsets) == (whole.text, whole.logprobs.tokens, whole.logprobs.token_logprobs,
                                                 whole.logprobs.text_offset)


async def test_token_id_prompts_as_lm_eval_sends_them(http, base_url):
    """lm-eval's local-completions: prompt [[ids]], echo, logprobs 1, max_tokens 1; it sums
    token_logprobs[ctxlen:-1]."""
    async with http.post(base_url + "/tokenize", json={"content": "Paris is the capital of France"}) as response:
        ids = (await response.json())["tokens"]
    body = {"model": MODEL, "prompt": [ids], "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
    async with http.post(base_url + "/v1/completions", json=body) as response:
        answer = await response.json()
    assert response.status == 200, answer
    choice = answer["choices"][0]
    assert choice["text"].startswith("Paris is the capital of France")
    logprobs = choice["logprobs"]
    assert len(logprobs["token_logprobs"]) == len(ids) + 1
    continuation = logprobs["token_logprobs"][3:-1]
    assert all(math.isfinite(v) and v <= 0 for v in continuation)
    assert all(len(top) == 1 for top in logprobs["top_logprobs"][1:])
    async with http.post(base_url + "/v1/completions", json={**body, "prompt": ids, "max_tokens": 0}) as response:
        again = (await response.json())["choices"][0]["logprobs"]
    assert again["token_logprobs"] == logprobs["token_logprobs"][:-1]  # the same prompt, scored the same


@pytest.mark.parametrize("fields,field", [
    ({"echo": True, "n": 2}, "echo"),
    ({"prompt": [1, -1]}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"max_tokens": -1}, "max_tokens"),
])
async def test_bad_echo_and_prompt_fields_are_400(http, base_url, fields, field):
    async with http.post(base_url + "/v1/completions", json={"prompt": "Hi", "logprobs": 1, **fields}) as response:
        body = await response.json()
    assert response.status == 400, body
    assert body["error"]["type"] == "invalid_request_error"
    assert field in [problem["field"] for problem in body["error"]["errors"]]
