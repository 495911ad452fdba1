"""Log probabilities and n > 1 choices, through the unmodified openai SDK, on the real model."""

import math

import openai
import pytest

from tests.helpers import sse_events

MODEL = "smollm2-135m-instruct"
PROMPTS = [
    "Name three fruits.",
    "Répète: 🌊🐳 日本語のテキスト",  # emoji and CJK: tokens that split UTF-8 characters
]


@pytest.fixture
def client(base_url):
    return openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)


def _entries_bytes(entries) -> bytes:
    return b"".join(bytes(entry.bytes) for entry in entries)


@pytest.mark.parametrize("prompt", PROMPTS)
async def test_greedy_chat_logprobs_are_the_models_distribution(client, prompt):
    messages = [{"role": "user", "content": prompt}]
    whole = await client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=40,
                                                 logprobs=True, top_logprobs=20)
    choice = whole.choices[0]
    entries = choice.logprobs.content
    # The text is those bytes as UTF-8 (a character cut off by max_tokens ends as U+FFFD).
    assert entries and _entries_bytes(entries).decode("utf-8", errors="replace") == choice.message.content
    for entry in entries:
        assert len(entry.top_logprobs) == 20
        assert entry.top_logprobs[0].bytes == entry.bytes  # greedy drew the likeliest token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert sum(math.exp(alt.logprob) for alt in entry.top_logprobs) <= 1 + 1e-6
        logprobs = [alt.logprob for alt in entry.top_logprobs]
        assert logprobs == sorted(logprobs, reverse=True)

    stream = await client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=40,
                                                  logprobs=True, top_logprobs=20, stream=True)
    streamed, text = [], ""
    async for chunk in stream:
        for part in chunk.choices:
            text += part.delta.content or ""
            if part.logprobs is not None:
                streamed.extend(part.logprobs.content)
    assert text == choice.message.content
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in entries]


async def test_the_chosen_token_is_reported_when_not_in_the_top(client):
    """Sampling at a high temperature draws unlikely tokens: each still has its entry, with no alternatives asked."""
    whole = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say something."}], temperature=2, seed=3,
        max_tokens=24, logprobs=True, top_logprobs=0)
    entries = whole.choices[0].logprobs.content
    assert len(entries) >= 1 and all(entry.top_logprobs == [] and entry.logprob <= 0 for entry in entries)
    assert any(entry.logprob < math.log(0.5) for entry in entries)


async def test_completion_logprobs_shape(client):
    whole = await client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0,
                                            max_tokens=8, logprobs=3)
    choice = whole.choices[0]
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text
    assert len(lp.token_logprobs) == len(lp.tokens) == len(lp.top_logprobs) == len(lp.text_offset)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3 and max(top.values()) == pytest.approx(logprob) and top[token] == pytest.approx(logprob)


async def test_completion_logprobs_zero_gives_the_tokens_alone(client):
    whole = await client.completions.create(model=MODEL, prompt="One, two,", temperature=0, max_tokens=4, logprobs=0)
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == 4 and lp.top_logprobs == [{}] * 4 and all(v <= 0 for v in lp.token_logprobs)


async def test_n_greedy_choices_are_equal(client):
    whole = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write a sentence about rivers."}], temperature=0,
        max_tokens=32, n=3)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    texts = {c.message.content for c in whole.choices}
    assert len(texts) == 1 and texts.pop().strip()
    assert whole.usage.completion_tokens == 3 * whole.usage.completion_tokens // 3
    alone = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write a sentence about rivers."}], temperature=0,
        max_tokens=32)
    assert alone.choices[0].message.content == whole.choices[0].message.content
    assert whole.usage.prompt_tokens == alone.usage.prompt_tokens  # the prompt counts once


async def test_n_seeded_choices_are_repeatable_and_differ(client):
    request = dict(model=MODEL, messages=[{"role": "user", "content": "Invent a name for a cat."}],
                   temperature=0.8, seed=11, max_tokens=24, n=3)
    first = await client.chat.completions.create(**request)
    second = await client.chat.completions.create(**request)
    texts = [c.message.content for c in first.choices]
    assert texts == [c.message.content for c in second.choices]
    assert len(set(texts)) > 1
    # Choice i samples with seed + i: choice 1 is what a single request with seed 12 gives.
    single = await client.chat.completions.create(**{**request, "n": 1, "seed": 12})
    assert single.choices[0].message.content == texts[1]


async def test_n_streamed_chunks_carry_their_index(http, base_url, client):
    body = {"model": MODEL, "prompt": "A list of colors:", "temperature": 0.9, "seed": 5, "max_tokens": 16, "n": 2,
            "stream": True}
    async with http.post(base_url + "/v1/completions", json=body) as response:
        assert response.status == 200
        events = await sse_events(response)
    texts, finishes = ["", ""], [None, None]
    for event in events[:-1]:
        for choice in event["choices"]:
            texts[choice["index"]] += choice["text"]
            finishes[choice["index"]] = choice["finish_reason"] or finishes[choice["index"]]
    whole = await client.completions.create(**{k: v for k, v in body.items() if k != "stream"})
    assert texts == [c.text for c in whole.choices] and finishes == [c.finish_reason for c in whole.choices]


async def test_echo_leads_with_the_prompt(client):
    plain = await client.completions.create(model=MODEL, prompt="Roses are red,", temperature=0, max_tokens=8)
    echoed = await client.completions.create(model=MODEL, prompt="Roses are red,", temperature=0, max_tokens=8,
                                             echo=True, best_of=1)
    assert echoed.choices[0].text == "Roses are red," + plain.choices[0].text


@pytest.mark.parametrize("route,fields,field", [
    ("/v1/chat/completions", {"n": 5}, "n"),  # the shared worker has 4 slots
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"echo": True}, "echo"),
    ("/v1/completions", {"logprobs": 6}, "logprobs"),
    ("/v1/completions", {"n": 2, "best_of": 3}, "best_of"),
    ("/v1/completions", {"echo": True, "n": 2}, "echo"),
])
async def test_bad_choice_and_logprob_fields_are_400(http, base_url, route, fields, field):
    payload = {"messages": [{"role": "user", "content": "Hi"}]} if "chat" in route else {"prompt": "Hi"}
    async with http.post(base_url + route, json={**payload, "max_tokens": 4, **fields}) as response:
        body = await response.json()
    assert response.status == 400, body
    assert field in [problem["field"] for problem in body["error"]["errors"]]
