"""/v1/embeddings on the real model: the openai SDK, batching, encodings, token ids, refusals, and
generation running beside it."""

from __future__ import annotations

import asyncio
import base64
import math
import struct
from pathlib import Path

import gguf
import openai
import pytest
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

from tests.conftest import WorkerProcess, start_worker
from tests.gguf_files import read_gguf
from tests.helpers import completion_text, openai_once

MODEL = "smollm2-135m-instruct"
SENTENCES = [
    "The cat is sleeping on the sofa.", "How do I reset my password?", "Paris is the capital of France.",
    "The recipe needs two cups of flour.", "He paid the electricity bill online.", "Rain is expected tomorrow.",
    "She plays the violin in an orchestra.", "The train to Berlin leaves at noon.", "Water boils at 100 degrees.",
    "My laptop battery drains too fast.", "The museum opens on Sundays.", "Tigers are the largest cats.",
    "Our team won the football match.", "Photosynthesis turns light into sugar.", "Turn left at the bakery.",
    "The invoice is due at the end of the month.",
]
# (sentence, its paraphrase, an unrelated sentence)
TRIPLES = [
    ("The cat is sleeping on the sofa.", "A cat naps on the couch.", "The stock market fell sharply today."),
    ("How do I reset my password?", "I forgot my password, how can I change it?",
     "The recipe needs two cups of flour."),
    ("Paris is the capital of France.", "France's capital city is Paris.",
     "Photosynthesis converts light into energy."),
]


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> WorkerProcess:
    # One llama.cpp thread: on a busy 2-core machine two threads wait on each other at every barrier.
    process = start_worker(tmp_path_factory.mktemp("embeddings"), "--embeddings", "--parallel", "2",
                           "--ctx-size", "4096", "--threads", "1")
    yield process
    assert process.stop() == 0, process.log()[-3000:]


@pytest.fixture(scope="module")
def width(model_path: Path) -> int:
    """The model's embedding width, as the GGUF states it (576 for SmolLM2-135M)."""
    reader = read_gguf(model_path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    return int(reader.fields[f"{arch}.embedding_length"].parts[-1][0])


async def embed(http, url: str, body: dict) -> dict:
    return await openai_once(http, url + "/v1/embeddings", body)


async def vectors(http, url: str, inputs) -> list[list[float]]:
    return [item["embedding"] for item in (await embed(http, url, {"input": inputs}))["data"]]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))  # unit vectors


def max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for va, vb in zip(a, b) for x, y in zip(va, vb))


def test_sdk_embeds_sixteen_sentences_as_unit_vectors_of_the_model_width(embedder, width):
    client = openai.OpenAI(base_url=embedder.url + "/v1", api_key="unused")
    result = client.embeddings.create(model=MODEL, input=SENTENCES)  # the SDK asks for base64 and decodes it
    assert width == 576 and [item.index for item in result.data] == list(range(16))
    for item in result.data:
        assert len(item.embedding) == width
        assert abs(math.fsum(x * x for x in item.embedding) - 1) < 1e-5
    assert result.model == MODEL and result.usage.prompt_tokens == result.usage.total_tokens > 16
    assert len({tuple(item.embedding) for item in result.data}) == 16


async def test_a_sentence_is_closer_to_its_paraphrase_than_to_an_unrelated_one(http, embedder):
    for sentence, paraphrase, unrelated in TRIPLES:
        a, p, u = await vectors(http, embedder.url, [sentence, paraphrase, unrelated])
        assert cosine(a, p) > cosine(a, u) + 0.05, (sentence, cosine(a, p), cosine(a, u))


async def test_batched_equals_one_at_a_time_and_concurrent_requests(http, embedder):
    batched = await vectors(http, embedder.url, SENTENCES)
    alone = [(await vectors(http, embedder.url, s))[0] for s in SENTENCES]
    # Sent at once, the requests share decodes in whatever layout they arrive: still the same vectors.
    concurrent = [v[0] for v in await asyncio.gather(*(vectors(http, embedder.url, s) for s in SENTENCES))]
    assert max_gap(batched, alone) < 1e-5 and max_gap(concurrent, alone) < 1e-5


async def test_base64_is_the_float_vector_as_little_endian_float32(http, embedder):
    floats = await embed(http, embedder.url, {"input": SENTENCES[:3], "encoding_format": "float"})
    packed = await embed(http, embedder.url, {"input": SENTENCES[:3], "encoding_format": "base64"})
    for f, b in zip(floats["data"], packed["data"]):
        raw = base64.b64decode(b["embedding"])
        assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == f["embedding"]
    assert floats["usage"] == packed["usage"]


async def test_token_ids_embed_like_their_text(http, embedder):
    async with http.post(embedder.url + "/tokenize", json={"content": SENTENCES[0], "add_special": True}) as r:
        ids = (await r.json())["tokens"]
    text = await embed(http, embedder.url, {"input": SENTENCES[0]})
    flat = await embed(http, embedder.url, {"input": ids})
    nested = await embed(http, embedder.url, {"input": [ids, SENTENCES[1]]})
    assert flat["data"][0]["embedding"] == text["data"][0]["embedding"]
    assert max_gap([nested["data"][0]["embedding"]], [text["data"][0]["embedding"]]) < 1e-5
    assert flat["usage"]["prompt_tokens"] == text["usage"]["prompt_tokens"] == len(ids)


@pytest.mark.parametrize("body,fields,code", [
    ({}, ["input"], "invalid_request"),
    ({"input": ""}, ["input"], "invalid_request"),
    ({"input": []}, ["input"], "invalid_request"),
    ({"input": {"text": "hi"}}, ["input"], "invalid_request"),
    ({"input": ["fine", "", [], 7.5]}, ["input[1]", "input[2]", "input[3]"], "invalid_request"),
    ({"input": [1, -1, 49152]}, ["input[1]", "input[2]"], "invalid_request"),
    ({"input": [1, True]}, ["input[0]", "input[1]"], "invalid_request"),  # true is no token id: a list of inputs
    ({"input": [[1, -1], [49152]]}, ["input[0][1]", "input[1][0]"], "invalid_request"),
    ({"input": ["x"] * 2049}, ["input"], "invalid_request"),
    ({"input": "hi", "encoding_format": "hex", "dimensions": 64, "user": 5, "model": 3},
     ["encoding_format", "dimensions", "user", "model"], "invalid_request"),
    ({"input": "hi", "dimensions": "576"}, ["dimensions"], "invalid_request"),
    ({"input": ["short", "word " * 600]}, ["input[1]"], "context_length_exceeded"),
    ({"input": [1] * 513}, ["input"], "context_length_exceeded"),
])
async def test_bad_input_is_a_400_naming_each_field(http, embedder, body, fields, code):
    async with http.post(embedder.url + "/v1/embeddings", json=body) as response:
        assert response.status == 400, await response.text()
        error = (await response.json())["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == code
    named = [problem["field"] for problem in error["errors"]]
    assert all(field in named for field in fields), (fields, error)


async def test_another_model_is_not_found(http, embedder):
    async with http.post(embedder.url + "/v1/embeddings", json={"input": "hi", "model": "another-model"}) as response:
        assert response.status == 404
        error = (await response.json())["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"


async def test_dimensions_equal_to_the_width_are_accepted(http, embedder, width):
    body = await embed(http, embedder.url, {"input": "hi", "dimensions": width, "user": "u-1", "model": MODEL})
    assert len(body["data"][0]["embedding"]) == width


async def test_a_worker_without_embeddings_says_how_to_enable_them(http, base_url):
    async with http.post(base_url + "/v1/embeddings", json={"input": "hi"}) as response:
        assert response.status == 404
        error = (await response.json())["error"]
    assert error["code"] == "embeddings_disabled" and "--embeddings" in error["message"]


async def test_generation_runs_beside_embeddings(http, embedder):
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Name three rivers."}],
            "temperature": 0, "max_tokens": 32}
    alone = completion_text(await openai_once(http, embedder.url + "/v1/chat/completions", chat))
    together = await asyncio.gather(
        openai_once(http, embedder.url + "/v1/chat/completions", chat),
        *(vectors(http, embedder.url, SENTENCES) for _ in range(2)),
    )
    # Embeddings decode in their own context on the engine thread: the greedy text does not move.
    assert completion_text(together[0]) == alone
    assert all(len(v) == 16 for v in together[1:])


def test_pooling_override_takes_effect(tmp_path):
    """cls pooling reads the first token alone (no BOS here, causal attention): inputs that start alike match."""
    worker = start_worker(tmp_path, "--embeddings", "--pooling", "cls", "--parallel", "1", "--ctx-size", "2048",
                          "--threads", "1")
    try:
        client = openai.OpenAI(base_url=worker.url + "/v1", api_key="unused")
        a, b, c = (d.embedding for d in client.embeddings.create(
            model=MODEL, input=["Hello world", "Hello there, friend", "Goodbye"]).data)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    assert a == b and a != c


def test_the_gguf_names_the_pooling_and_a_generative_one_gets_mean(tmp_path, model_path, embedder):
    reader = read_gguf(model_path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    named = tmp_path / "pooling-last.gguf"
    copy_with_new_metadata(reader, gguf.GGUFWriter(named, arch=arch, endianess=reader.endianess),
                           {f"{arch}.pooling_type": MetadataDetails(gguf.GGUFValueType.UINT32, 3)}, [])  # last
    worker = start_worker(tmp_path, "--model", str(named), "--embeddings", "--parallel", "1", "--ctx-size", "1024",
                          "--threads", "1")
    assert worker.stop() == 0, worker.log()[-3000:]
    assert '"embeddings_pooling": "last"' in worker.log()
    assert '"embeddings_pooling": "mean"' in embedder.log()  # SmolLM2's GGUF names none


def test_pooling_without_embeddings_is_refused(tmp_path):
    worker = start_worker(tmp_path, "--pooling", "mean", wait=False)
    assert worker.process.wait(60) != 0
    assert "--pooling mean only applies to embeddings: add --embeddings" in worker.log()
