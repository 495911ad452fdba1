"""LoRA adapters per request, against a worker serving two steering adapters made from the test model's own weights
(bench/adapters.py): under one at scale 1 the model writes " zebra" at every step, under the other " purple", at
scale 0 it is the base model. Each assertion then says something: a row decoded under the wrong adapter writes the
wrong word, and cells made under one adapter change what a prompt continues with under another."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.adapters import PURPLE, ZEBRA, Base, steering_adapter
from tests.conftest import start_worker
from tests.helpers import openai_once, openai_stream

PROMPT = "The capital of France is"
# A scale at which the base model's text turns to the adapter's word part way (bench/adapters.py: measured on this
# prompt, 0.003-0.004 for both adapters; from 0.01 on they write their word from the first or second step).
MILD = 0.004


@pytest.fixture(scope="module")
def adapters(adapter_base: Base, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("adapters")
    return (steering_adapter(adapter_base, ZEBRA, folder / "zebra.gguf", "zebra"),
            steering_adapter(adapter_base, PURPLE, folder / "purple.gguf", "purple"))


@pytest.fixture(scope="module")
def lora_url(adapters: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory):
    zebra, purple = adapters
    worker = start_worker(tmp_path_factory.mktemp("lora"), "--parallel", "3", "--ctx-size", "3072",
                          "--lora", str(zebra), "--lora", f"{purple}:0.5", "--lora-init-without-apply")
    yield worker.url
    assert worker.stop() == 0, worker.log()[-3000:]


def completion(lora: list[dict] | None = None, max_tokens: int = 8, prompt: str = PROMPT, **extra: object) -> dict:
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **({"lora": lora} if lora is not None
                                                                                else {}), **extra}


async def text(http, url: str, body: dict) -> str:
    return (await openai_once(http, url + "/v1/completions", body))["choices"][0]["text"]


async def test_an_adapter_writes_its_token_and_at_scale_zero_is_the_base_model(http, lora_url, base_url):
    base = await text(http, base_url, completion())  # a worker without adapters
    assert base and "zebra" not in base
    assert await text(http, lora_url, completion()) == base  # started with the adapters at scale 0
    assert await text(http, lora_url, completion([{"id": 0, "scale": 0}, {"id": 1, "scale": 0.0}])) == base
    assert await text(http, lora_url, completion([{"id": 0, "scale": 1}])) == " zebra" * 8
    assert await text(http, lora_url, completion([{"id": 1, "scale": 1}])) == " purple" * 8
    named = await openai_once(http, lora_url + "/v1/completions", completion(model="purple"))  # at its flag's 0.5
    assert named["model"] == "purple" and named["choices"][0]["text"] == " purple" * 8
    mild = await text(http, lora_url, completion([{"id": 0, "scale": MILD}], max_tokens=16))
    assert mild.startswith(" Paris") and mild != base[:len(mild)] and "zebra" in mild  # bent, not replaced


async def test_requests_under_different_adapters_at_once_each_equal_their_text_alone(http, lora_url):
    """The sets take turns at the context; a row never shares a call with another set's."""
    bodies = [completion([{"id": 0, "scale": 1}], 24), completion([], 24), completion(model="purple", max_tokens=24),
              completion([{"id": 0, "scale": MILD}], 24), completion([{"id": 1, "scale": MILD}], 24)]
    alone = [await text(http, lora_url, body) for body in bodies]
    assert alone[0] == " zebra" * 24 and alone[2] == " purple" * 24 and len(set(alone)) == 5
    together = await asyncio.gather(*(openai_stream(http, lora_url + "/v1/completions", body) for body in bodies))
    assert [streamed.text for streamed in together] == alone


async def test_new_scales_reach_the_next_request_and_never_a_running_one(http, lora_url):
    base = await text(http, lora_url, completion(max_tokens=48))
    async with http.post(lora_url + "/v1/completions", json={**completion(max_tokens=48), "stream": True}) as running:
        await running.content.readline()  # it is admitted and streaming
        async with http.post(lora_url + "/lora-adapters", json=[{"id": 0, "scale": 1}]) as response:
            assert await response.json() == {"success": True}
        streamed = (await running.read()).decode()
    try:
        pieces = [line for line in streamed.split("\n") if line.startswith("data: {")]
        assert "zebra" not in streamed and len(pieces) > 5
        assert await text(http, lora_url, completion()) == " zebra" * 8
        async with http.get(lora_url + "/lora-adapters") as response:
            assert [entry["scale"] for entry in await response.json()] == [1.0, 0.0]
    finally:
        async with http.post(lora_url + "/lora-adapters", json=[]) as response:
            assert response.status == 200
    assert await text(http, lora_url, completion(max_tokens=48)) == base


async def test_cells_made_under_an_adapter_are_never_reused_under_another(http, lora_url):
    prompt = "Write a long story about a lighthouse keeper who finds a map. " * 8  # ~110 tokens: whole blocks
    mild = [{"id": 1, "scale": MILD}]
    first = await openai_once(http, lora_url + "/v1/completions", completion(mild, 16, prompt))
    again = await openai_once(http, lora_url + "/v1/completions", completion(mild, 16, prompt))
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 64  # its own cells: reused
    assert again["choices"][0]["text"] == first["choices"][0]["text"]
    for other in ([], [{"id": 0, "scale": MILD}], [{"id": 1, "scale": 2 * MILD}]):
        answer = await openai_once(http, lora_url + "/v1/completions", completion(other, 16, prompt))
        assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, other


async def test_chat_messages_and_responses_take_lora(http, lora_url):
    lora = [{"id": 0, "scale": 1}]
    messages = [{"role": "user", "content": "Hi"}]
    chat = await openai_once(http, lora_url + "/v1/chat/completions",
                             {"messages": messages, "max_tokens": 4, "temperature": 0, "lora": lora})
    assert chat["choices"][0]["message"]["content"] == " zebra" * 4
    async with http.post(lora_url + "/v1/messages", json={"messages": messages, "max_tokens": 4, "temperature": 0,
                                                            "model": "zebra"}) as response:
        message = await response.json()
    assert message["model"] == "zebra" and message["content"][0]["text"] == " zebra" * 4
    async with http.post(lora_url + "/v1/responses", json={"input": "Hi", "max_output_tokens": 4, "temperature": 0,
                                                            "lora": [{"id": 1, "scale": 1}]}) as response:
        output = (await response.json())["output"]
    assert output[-1]["content"][0]["text"] == " purple" * 4


async def test_models_and_lora_adapters_list_the_adapters(http, lora_url, adapters):
    async with http.get(lora_url + "/v1/models") as response:
        listed = (await response.json())["data"]
    assert [entry["id"] for entry in listed][1:] == ["zebra", "purple"]
    assert listed[1]["parent"] == listed[0]["id"] and listed[1]["root"] == str(adapters[0])
    async with http.get(lora_url + "/lora-adapters") as response:
        assert await response.json() == [
            {"id": 0, "path": str(adapters[0]), "scale": 0.0, "name": "zebra"},
            {"id": 1, "path": str(adapters[1]), "scale": 0.0, "name": "purple"}]


async def test_every_bad_lora_input_is_listed(http, lora_url):
    body = ('{"prompt": "Hi", "max_tokens": 2, "lora": [{"id": 2, "scale": 1}, {"id": 0, "scale": 1e999}, '
            '{"id": 0, "scale": 1}, {"id": "zebra", "scale": 1}, {"id": 1}]}')
    async with http.post(lora_url + "/v1/completions", data=body) as response:
        assert response.status == 400
        problems = (await response.json())["error"]["errors"]
    assert [p["field"] for p in problems] == ["lora[0].id", "lora[1].scale", "lora[2].id", "lora[3].id", "lora[4]"]
    assert problems[0]["constraint"] == "0 <= id < 2" and problems[1]["value"] == "inf"
    async with http.post(lora_url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                                  "lora": {"id": 0}}) as response:
        assert response.status == 400
    async with http.post(lora_url + "/v1/completions", json=completion(model="zebra-2")) as response:
        assert response.status == 404
        assert "'zebra', 'purple'" in (await response.json())["error"]["message"]
    for bad in ({"id": 0, "scale": 1}, [{"id": 7, "scale": 1}], [{"id": 0, "scale": "high"}]):
        async with http.post(lora_url + "/lora-adapters", json=bad) as response:
            assert response.status == 400, bad
    async with http.get(lora_url + "/lora-adapters") as response:
        assert [entry["scale"] for entry in await response.json()] == [0.0, 0.0]  # nothing was set
    assert await text(http, lora_url, completion(max_tokens=2))  # and it serves on
