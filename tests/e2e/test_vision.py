"""Images in: a worker serving the test model with the colour projector (tests/vision_helpers.py) answers what it
sees, refuses what it cannot read with a 400 naming why, and serves on."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import WorkerProcess, start_worker
from tests.helpers import ask_chat
from tests.vision_helpers import (
    COLOURS,
    IMAGE_TOKENS,
    QUESTION,
    SIGLIP_BASE,
    build_projector,
    data_url,
    image_message,
    png,
)

CHAT = "/v1/chat/completions"
CTX_PER_SLOT = 512  # --ctx-size 2048, --parallel 4


@pytest.fixture(scope="module")
def projector(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_projector(model_path, tmp_path_factory.mktemp("mmproj") / "mmproj-colours.gguf")


@pytest.fixture(scope="module")
def vision(projector: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = start_worker(tmp_path_factory.mktemp("vision"), "--mmproj", str(projector), "--parallel", "4",
                          "--ctx-size", "2048", "--threads", "2", "--log-level", "debug")
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


async def ask(http, worker: WorkerProcess, messages: list[dict], **fields) -> tuple[int, dict]:
    return await ask_chat(http, worker.url, messages, **fields)


async def test_models_and_health_say_the_worker_reads_images(http, vision):
    async with http.get(vision.url + "/v1/models") as response:
        assert (await response.json())["data"][0]["input_modalities"] == ["text", "image"]
    async with http.get(vision.url + "/health") as response:
        assert (await response.json())["input_modalities"] == ["text", "image"]


@pytest.mark.parametrize("colour", ["red", "blue"])
async def test_the_model_names_the_colour_it_is_shown(http, vision, colour):
    """The projector hands the model the colour's word where the image is: the answer must name that colour and
    no other."""
    status, body = await ask(http, vision, image_message(png(COLOURS[colour])))
    assert status == 200, body
    answer = body["choices"][0]["message"]["content"].lower()
    assert colour in answer and not any(other in answer for other in COLOURS if other != colour), answer
    # The image's tokens are in the prompt's count: 16 image tokens beside the question's.
    assert body["usage"]["prompt_tokens"] > IMAGE_TOKENS


async def test_a_projector_with_siglip_base_encoder_layers_encodes_through_them(http, model_path, tmp_path):
    """The images benchmark's projector (12 ViT blocks of SigLIP-base's shape, bench/images.py): the colour survives
    its small-weighted blocks, and the same blocks with large residual weights change the answer, so clip.cpp
    computes every block and the benchmark times real encoding."""
    answers = []
    for scale in (SIGLIP_BASE.residual_scale, 1.0):
        projector = build_projector(model_path, tmp_path / f"mmproj-siglip-{scale:g}.gguf",
                                    encoder=replace(SIGLIP_BASE, residual_scale=scale))
        worker = start_worker(tmp_path, "--mmproj", str(projector), "--parallel", "1", "--ctx-size", "1024")
        try:
            status, body = await ask(http, worker, image_message(png(COLOURS["green"])))
            assert status == 200, body
            answers.append(body["choices"][0]["message"]["content"].lower())
        finally:
            assert worker.stop() == 0, worker.log()[-3000:]
    kept, swamped = answers
    assert "green" in kept and "red" not in kept and "blue" not in kept, kept
    assert swamped != kept, swamped


async def test_a_projector_for_another_model_is_one_line_naming_both_widths(model_path, tmp_path):
    wrong = build_projector(model_path, tmp_path / "mmproj-512.gguf", width=512)
    worker = start_worker(tmp_path, "--mmproj", str(wrong), wait=False)
    assert worker.process.wait(120) != 0
    log = worker.log()
    assert "n_embd = 576" in log and "n_embd = 512" in log, log[-2000:]


def gigapixel_png() -> bytes:
    header = struct.pack(">IIBBBBB", 60_000, 60_000, 8, 2, 0, 0, 0)
    ihdr = struct.pack(">I", len(header)) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"\x00" * 64


async def test_every_bad_image_is_a_400_naming_it_and_the_worker_serves_on(http, vision):
    truncated = png(COLOURS["red"])[:40]  # a PNG header and no pixels: sized, but stb_image cannot decode it
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/red.png"}},
        {"type": "image_url", "image_url": {"url": data_url(b"not an image")}},
        {"type": "image_url", "image_url": {"url": data_url(gigapixel_png())}},
        {"type": "text", "text": QUESTION}]}]
    status, body = await ask(http, vision, messages)
    assert status == 400, body
    problems = {p["field"]: p["message"] for p in body["error"]["errors"]}
    assert "fetches no URLs" in problems["messages[0].content[0].image_url.url"]
    assert "is not a PNG, JPEG, GIF or BMP image" in problems["messages[0].content[1].image_url.url"]
    assert "60000 x 60000 = 3600000000 pixels" in problems["messages[0].content[2].image_url.url"]
    status, body = await ask(http, vision, image_message(truncated))
    assert status == 400 and "not an image stb_image decodes" in body["error"]["message"], body
    status, body = await ask(http, vision, image_message(png(COLOURS["red"])))
    assert status == 200 and "red" in body["choices"][0]["message"]["content"].lower(), body


async def test_more_images_than_the_context_holds_says_the_counts(http, vision):
    many = CTX_PER_SLOT // IMAGE_TOKENS + 1
    images = [png((i, 0, 0)) for i in range(many)]
    status, body = await ask(http, vision, image_message(*images))
    assert status == 400, body
    message = body["error"]["message"]
    assert f"the {many} images take {many * IMAGE_TOKENS} tokens" in message and "holds 512" in message, message


async def test_a_worker_without_a_projector_names_mmproj(http, base_url):
    async with http.post(base_url + CHAT, json={"messages": image_message(png(COLOURS["red"])),
                                                "max_tokens": 4}) as response:
        assert response.status == 400
        message = (await response.json())["error"]["message"]
    assert "--mmproj" in message
    async with http.post(base_url + CHAT, json={"messages": [{"role": "user", "content": "Hi"}],
                                                "max_tokens": 4}) as response:
        assert response.status == 200


# Text after the image, long enough that the cached aligned blocks of a repeat cover the whole image.
LONG_QUESTION = ("What colour is this? Look at the picture above carefully, then answer with the name of its "
                 "colour in one word.")


async def test_the_same_image_again_reuses_its_cells_and_the_text_equals_no_cache(http, vision, projector, tmp_path):
    """The prefix cache keys an image by its pixels: asked again, its cells come from the cache (cached_tokens
    cover it), and the answer is the one a worker with no prefix cache gives."""
    messages = image_message(png(COLOURS["blue"]), text=LONG_QUESTION)
    status, first = await ask(http, vision, messages)
    assert status == 200, first
    status, second = await ask(http, vision, messages)
    assert status == 200, second
    prompt, cached = second["usage"]["prompt_tokens"], second["usage"]["prompt_tokens_details"]["cached_tokens"]
    # Exact mode reuses whole aligned blocks and prefills at least the last two rows: all but < 18 tokens.
    assert cached >= prompt - 17 and cached > IMAGE_TOKENS, second["usage"]
    answer = second["choices"][0]["message"]["content"]
    assert answer == first["choices"][0]["message"]["content"]
    uncached = start_worker(tmp_path, "--mmproj", str(projector), "--prefix-cache", "off", "--ctx-size", "2048")
    try:
        status, cold = await ask(http, uncached, messages)
    finally:
        assert uncached.stop() == 0
    assert status == 200 and cold["choices"][0]["message"]["content"] == answer, cold


async def test_an_image_beside_three_text_streams_leaves_each_text_as_alone(http, vision):
    texts = [[{"role": "user", "content": f"Write a short story about a {animal}."}]
             for animal in ("cat", "lighthouse keeper", "robot")]
    image = image_message(png((200, 30, 30)), text=LONG_QUESTION)  # a red no other test sends: prefilled cold
    # Together first, while nothing is cached: the image is encoded and prefilled beside the streams' decode rows.
    together = await asyncio.gather(*(ask(http, vision, messages, max_tokens=48, seed=1) for messages in texts),
                                    ask(http, vision, image, seed=1))
    alone = [await ask(http, vision, messages, max_tokens=48, seed=1) for messages in texts]
    image_alone = await ask(http, vision, image, seed=1)
    for (status, solo), (status_together, beside) in zip([*alone, image_alone], together):
        assert status == status_together == 200
        assert beside["choices"][0]["message"]["content"] == solo["choices"][0]["message"]["content"]


async def test_the_encoder_takes_half_the_threads_only_beside_decoding_streams(http, vision):
    """An image that arrives once every stream has ended is encoded with all the worker's threads (2), one that
    arrives while a stream decodes with half: the flag the last stream's step set does not outlive it."""
    assert (await ask(http, vision, [{"role": "user", "content": "Say hello."}], max_tokens=4))[0] == 200
    assert (await ask(http, vision, image_message(png((10, 200, 90)))))[0] == 200  # colours no other test sends
    alone = _encoded(vision)[-1]
    body = {"prompt": "Tell a long story about a harbour.", "max_tokens": 400, "temperature": 0, "stream": True,
            "ignore_eos": True}
    async with http.post(vision.url + "/v1/completions", json=body) as streaming:
        assert streaming.status == 200
        await streaming.content.readline()  # the stream decodes
        status, _ = await ask(http, vision, image_message(png((90, 10, 200))))
    assert status == 200
    beside = _encoded(vision)[-1]
    assert (alone["threads"], beside["threads"]) == (2, 1), (alone, beside)
    assert alone["tokens"] == beside["tokens"] == IMAGE_TOKENS


def _encoded(worker: WorkerProcess) -> list[dict]:
    """The worker's media_encoded log events, oldest first."""
    return [event for line in worker.log().splitlines() if '"media_encoded"' in line
            for event in [json.loads(line)] if event.get("event") == "media_encoded"]


def test_the_openai_sdk_sends_one_and_two_images_streamed_and_not(vision):
    import openai

    client = openai.OpenAI(base_url=vision.url + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    one = image_message(png(COLOURS["red"]))
    two = image_message(png(COLOURS["blue"]), png((0, 0, 250)))  # two blues, hashed apart: two images' tokens
    whole = client.chat.completions.create(model=model, messages=one, max_tokens=12, temperature=0)
    assert "red" in (whole.choices[0].message.content or "").lower()
    both = client.chat.completions.create(model=model, messages=two, max_tokens=12, temperature=0)
    assert "blue" in (both.choices[0].message.content or "").lower()
    assert both.usage is not None and whole.usage is not None
    assert both.usage.prompt_tokens == whole.usage.prompt_tokens + IMAGE_TOKENS
    stream = client.chat.completions.create(model=model, messages=one, max_tokens=12, temperature=0, stream=True)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed == whole.choices[0].message.content


def test_the_responses_api_takes_an_input_image(vision):
    import openai

    client = openai.OpenAI(base_url=vision.url + "/v1", api_key="unused", max_retries=0)
    response = client.responses.create(model=vision_model(vision), max_output_tokens=12, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_image", "image_url": data_url(png(COLOURS["red"])),
                                      "detail": "auto"},
                                     {"type": "input_text", "text": QUESTION}]}])
    assert "red" in response.output_text.lower() and "blue" not in response.output_text.lower()


def vision_model(worker: WorkerProcess) -> str:
    import urllib.request

    with urllib.request.urlopen(worker.url + "/v1/models") as response:
        return json.loads(response.read())["data"][0]["id"]


def test_the_anthropic_sdk_sends_an_image_block(vision):
    import anthropic

    client = anthropic.Anthropic(base_url=vision.url, api_key="unused", max_retries=0)
    model = vision_model(vision)
    blue = base64.b64encode(png(COLOURS["blue"])).decode()
    greedy = {"extra_body": {"temperature": 0}}  # this SDK takes no temperature argument
    message = client.messages.create(model=model, max_tokens=12, **greedy, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": blue}},
        {"type": "text", "text": QUESTION}]}])
    text = "".join(block.text for block in message.content if block.type == "text").lower()
    assert "blue" in text and "red" not in text, text
    with pytest.raises(anthropic.BadRequestError, match="fetches no URLs"):
        client.messages.create(model=model, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}])


async def test_a_slot_holding_an_image_saves_and_persists_its_leading_text(http, projector, tmp_path):
    """A file holds token ids (int32), which an image's stand-ins are not: a slot that holds an image is saved up to
    the image's first cell (the rest rides along and is dropped when restored), and --kv-dir writes its host
    memory's cells likewise when the worker stops; the file restores, and the next turn answers as before."""
    folder, kv_dir = tmp_path / "slots", tmp_path / "kv"
    worker = start_worker(tmp_path, "--mmproj", str(projector), "--parallel", "1", "--ctx-size", "1024",
                          "--slot-save-path", str(folder), "--kv-dir", str(kv_dir))
    messages = [{"role": "system", "content": LONG_QUESTION}, *image_message(png(COLOURS["green"]))]
    try:
        status, first = await ask(http, worker, messages)
        assert status == 200, first
        async with http.post(worker.url + "/slots/0?action=save", json={"filename": "green.bin"}) as response:
            assert response.status == 200, await response.text()
            saved = await response.json()
        # The text before the image: the system prompt's tokens and the user turn's opening, not the image's 16.
        assert 0 < saved["n_saved"] < first["usage"]["prompt_tokens"] - IMAGE_TOKENS, (saved, first["usage"])
        async with http.post(worker.url + "/slots/0?action=restore", json={"filename": "green.bin"}) as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["n_restored"] == saved["n_saved"]
        status, again = await ask(http, worker, messages)
        assert status == 200 and again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, again["usage"]
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    assert "kv_dir_written" in worker.log() and not any(kv_dir.glob("*.tmp")), worker.log()[-3000:]
    assert '"level": "error"' not in worker.log(), worker.log()[-3000:]
