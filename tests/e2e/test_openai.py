"""OpenAI-compatible routes on the real model: shapes, streaming, usage, the unmodified SDK."""

import asyncio

import openai
import pytest

from tests.helpers import completion_text, openai_once, openai_stream

MODEL = "smollm2-135m-instruct"
HI = [{"role": "user", "content": "Hi"}]


async def test_models_lists_the_served_model(http, base_url):
    async with http.get(base_url + "/v1/models") as response:
        body = await response.json()
    assert body["object"] == "list" and [m["id"] for m in body["data"]] == [MODEL]


async def test_chat_non_stream_shape(http, base_url):
    body = await openai_once(http, base_url + "/v1/chat/completions",
                             {"model": MODEL, "messages": HI, "temperature": 0, "max_tokens": 64})
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"].strip()
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 10 and 0 < usage["completion_tokens"] <= 64
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.parametrize("route,payload", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a story about a dragon."}]}),
    ("/v1/completions", {"prompt": "Once upon a time"}),
])
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "top_p": 0.95, "seed": 7}])
async def test_stream_equals_non_stream(http, base_url, route, payload, sampling):
    body = {**payload, **sampling, "max_tokens": 96}
    whole = await openai_once(http, base_url + route, body)
    streamed = await openai_stream(http, base_url + route, {**body, "stream_options": {"include_usage": True}})
    assert streamed.text == completion_text(whole)
    assert streamed.finish_reason == whole["choices"][0]["finish_reason"]
    # What the prefix cache held differs between the two sends; everything else must not.
    cached = [u.pop("prompt_tokens_details")["cached_tokens"] for u in (streamed.usage, whole["usage"])]
    assert streamed.usage == whole["usage"] and all(n >= 0 for n in cached)


async def test_stream_without_include_usage_sends_no_usage(http, base_url):
    streamed = await openai_stream(http, base_url + "/v1/completions", {"prompt": "Hello", "max_tokens": 8})
    assert streamed.usage is None and streamed.finish_reason == "length"
    assert streamed.events[0]["object"] == "text_completion"


async def test_chat_stream_opens_with_the_role(http, base_url):
    streamed = await openai_stream(http, base_url + "/v1/chat/completions", {"messages": HI, "max_tokens": 8})
    assert streamed.events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert streamed.events[0]["object"] == "chat.completion.chunk"


def test_openai_sdk_non_stream_and_stream(base_url):
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == [MODEL]
    whole = client.chat.completions.create(model=MODEL, messages=HI, temperature=0, max_tokens=48)
    pieces = [chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
        model=MODEL, messages=HI, temperature=0, max_tokens=48, stream=True) if chunk.choices]
    assert whole.choices[0].message.content and "".join(pieces) == whole.choices[0].message.content
    completion = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=12, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="The sky is", max_tokens=12, temperature=0, stream=True))
    assert completion.choices[0].finish_reason == "length" and streamed == completion.choices[0].text
    with pytest.raises(openai.BadRequestError, match="top_p"):
        client.chat.completions.create(model=MODEL, messages=HI, top_p=3)


async def test_concurrent_sdk_streams(base_url):
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused")

    async def one(seed: int) -> str:
        stream = await client.completions.create(model=MODEL, prompt="List three fruits:", max_tokens=24,
                                                 temperature=0.8, seed=seed, stream=True)
        return "".join([c.choices[0].text async for c in stream])

    first = await asyncio.gather(*(one(s) for s in range(4)))
    again = await asyncio.gather(*(one(s) for s in range(4)))
    assert first == again
