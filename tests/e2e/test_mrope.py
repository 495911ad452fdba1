"""Images placed by M-RoPE (Qwen2-VL to Qwen3.5): a worker serving the test model rewritten as a qwen2vl model with a
merger projector (tests/mrope_helpers.py) names the colour it is shown, answers as llama.cpp's own helper does, and
keeps exact mode's promise when an image's grid takes fewer positions than tokens: the same text from the cache, beside
other streams and in the next turn as with --prefix-cache off."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from tests.conftest import WorkerProcess, start_worker
from tests.helpers import ask_chat, completion_text
from tests.mrope_helpers import (
    IMAGE_POSITIONS,
    IMAGE_SIZE,
    IMAGE_TOKENS,
    MARKER,
    N_CTX,
    build_mrope_model,
    build_mrope_projector,
    chat_prompt,
    libmtmd_answer,
)
from tests.vision_helpers import COLOURS, QUESTION, image_message, png
from worker.engine.exactness.build_choice import LIB_PATH_ENV, default_dir

# Text after the image long enough that a repeat's cached aligned blocks reach past the image.
LONG_QUESTION = ("What colour is this? Look at the picture above carefully, then answer with the name of its "
                 "colour in one word.")
SLOT = ("--ctx-size", str(4 * N_CTX), "--parallel", "4")  # N_CTX cells a slot, as libmtmd_answer's context


@pytest.fixture(scope="module")
def mrope_files(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("mrope")
    model = build_mrope_model(model_path, folder / "qwen2vl-smollm2.gguf")
    return model, build_mrope_projector(model, folder / "mmproj-qwen2vl-colours.gguf")


@pytest.fixture(scope="module")
def mrope(mrope_files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory):
    model, projector = mrope_files
    worker = start_worker(tmp_path_factory.mktemp("mrope-worker"), "--model", str(model), "--mmproj", str(projector),
                          *SLOT)
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def picture(colour: str) -> bytes:
    return png(COLOURS[colour], IMAGE_SIZE, IMAGE_SIZE)


async def test_the_worker_loads_an_mrope_projector_and_counts_an_image_s_tokens(http, mrope):
    async with http.get(mrope.url + "/v1/models") as response:
        assert (await response.json())["data"][0]["input_modalities"] == ["text", "image"]
    one = await ask_chat(http, mrope.url, image_message(picture("red")))
    two = await ask_chat(http, mrope.url, image_message(picture("red"), picture("blue")))
    assert one[0] == two[0] == 200, (one, two)
    # Tokens, not positions: each 4x4 grid is 16 cells, though it takes 4 positions.
    assert two[1]["usage"]["prompt_tokens"] - one[1]["usage"]["prompt_tokens"] > IMAGE_TOKENS > IMAGE_POSITIONS
    logged = [json.loads(line) for line in mrope.log().splitlines() if '"images_read"' in line]
    assert logged and logged[-1]["image_tokens"] == 2 * IMAGE_TOKENS, logged[-1:]


@pytest.mark.parametrize("colour", ["red", "green", "blue"])
async def test_the_model_names_the_colour_and_answers_as_llama_cpp_s_own_helper(http, mrope, mrope_files, colour):
    """libmtmd_answer places the image and the text after it as mtmd_helper_eval_chunks does and decodes greedily,
    under exact mode's numerics (the batch-invariant build, flash attention on): the worker's answer, prefilled in
    its own chunks, is the same text."""
    status, body = await ask_chat(http, mrope.url, image_message(picture(colour)))
    assert status == 200, body
    answer = completion_text(body)
    assert colour in answer.lower() and not any(other in answer.lower() for other in COLOURS if other != colour)
    model, projector = mrope_files
    expected = await asyncio.to_thread(libmtmd_answer, model, projector, picture(colour),
                                       chat_prompt(model, MARKER + QUESTION), 12, exact=True)
    assert answer == expected


async def test_the_next_turn_reuses_the_image_s_cells_and_answers_as_with_no_cache(http, mrope, mrope_files, tmp_path):
    """A conversation about an image, resent with its history: the image's cells and the text after them come from
    the cache (their positions fold the image's grid), and every turn's text is a --prefix-cache off worker's."""
    first = image_message(picture("blue"), text=LONG_QUESTION)
    status, turn_one = await ask_chat(http, mrope.url, first, max_tokens=16)
    assert status == 200, turn_one
    second = [*first, {"role": "assistant", "content": completion_text(turn_one)},
              {"role": "user", "content": "And what colour is the sky on a clear day?"}]
    status, turn_two = await ask_chat(http, mrope.url, second, max_tokens=16)
    assert status == 200, turn_two
    usage = turn_two["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > turn_one["usage"]["prompt_tokens"] // 2 + IMAGE_TOKENS
    model, projector = mrope_files
    cold = start_worker(tmp_path, "--model", str(model), "--mmproj", str(projector), "--prefix-cache", "off", *SLOT)
    try:
        for messages, warm in ((first, turn_one), (second, turn_two)):
            status, body = await ask_chat(http, cold.url, messages, max_tokens=16)
            assert status == 200 and completion_text(body) == completion_text(warm), (body, warm)
    finally:
        assert cold.stop() == 0, cold.log()[-3000:]


async def test_an_image_beside_three_text_streams_leaves_each_text_as_alone(http, mrope):
    texts = [[{"role": "user", "content": f"Write a short story about a {animal}."}]
             for animal in ("cat", "lighthouse keeper", "robot")]
    image = image_message(png((30, 200, 30), IMAGE_SIZE, IMAGE_SIZE), text=LONG_QUESTION)  # a green no test sent
    together = await asyncio.gather(*(ask_chat(http, mrope.url, messages, max_tokens=48) for messages in texts),
                                    ask_chat(http, mrope.url, image))
    alone = [await ask_chat(http, mrope.url, messages, max_tokens=48) for messages in [*texts, image]]
    for (status, solo), (status_together, beside) in zip(alone, together):
        assert status == status_together == 200
        assert completion_text(beside) == completion_text(solo)


def test_streamed_and_responses_answers_are_the_chat_s(mrope):
    import openai

    client = openai.OpenAI(base_url=mrope.url + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    messages = image_message(picture("green"))
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0, stream=True)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert "green" in streamed.lower() and streamed == whole.choices[0].message.content
    response = client.responses.create(model=model, max_output_tokens=12, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_image", "image_url": messages[0]["content"][0]["image_url"]["url"],
                                      "detail": "auto"}, {"type": "input_text", "text": QUESTION}]}])
    assert response.output_text == streamed


async def test_an_image_across_a_block_boundary_is_prefilled_again_whole(http, mrope, mrope_files, tmp_path):
    """Where exact mode reuses whole prefilled 16-token blocks only (answers' cells untrusted: --flash-attn off on
    llama-cpp-python's own build, as tests/e2e/test_kv_dir.py runs it) and the block boundary a second question's
    reuse stops at falls inside the image (its grid's cells share one position: no cut keeps part of them), the
    reuse stops at the block before the image, which is prefilled again whole, and the answer is a cold worker's."""
    model, projector = mrope_files
    for words in range(1, 40):  # a system prompt that puts the image's first token 1..8 past a block boundary
        system = "Answer briefly. " + "Please. " * words
        before = chat_prompt(model, MARKER, system).split(MARKER)[0] + "<|vision_start|>"  # mtmd's text before it
        async with http.post(mrope.url + "/tokenize", json={"content": before}) as response:
            start = len((await response.json())["tokens"])
        if 1 <= start % 16 <= 8:
            break
    first = [{"role": "system", "content": system}, *image_message(picture("red"), text="Which colour is shown?")]
    second = [{"role": "system", "content": system}, *image_message(picture("red"), text="Name the colour you see.")]
    flags = ("--model", str(model), "--mmproj", str(projector), "--parallel", "1", "--ctx-size", str(N_CTX),
             "--flash-attn", "off")
    blocks = start_worker(tmp_path, *flags, env={LIB_PATH_ENV: str(default_dir())})
    try:
        async with http.get(blocks.url + "/health") as response:
            assert (await response.json())["exactness"]["answers_reused"] is False
        assert (await ask_chat(http, blocks.url, first))[0] == 200
        status, warm = await ask_chat(http, blocks.url, second)
        assert status == 200, warm
    finally:
        assert blocks.stop() == 0, blocks.log()[-3000:]
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == start - start % 16, (start, warm["usage"])
    assert worker_log_errors(blocks) == []
    cold = start_worker(tmp_path, *flags, "--prefix-cache", "off", env={LIB_PATH_ENV: str(default_dir())})
    try:
        status, body = await ask_chat(http, cold.url, second)
    finally:
        assert cold.stop() == 0, cold.log()[-3000:]
    assert status == 200 and completion_text(body) == completion_text(warm)


def worker_log_errors(worker: WorkerProcess) -> list[str]:
    return [line for line in worker.log().splitlines() if '"level": "error"' in line]


async def test_no_step_refused_a_row_or_a_cut(http, mrope):
    """What the tests above ran, with nothing in the log of rows that did not continue their cells or of cuts
    llama.cpp refused: tokens and positions were counted apart everywhere."""
    status, _ = await ask_chat(http, mrope.url, image_message(picture("red"), text=LONG_QUESTION))
    assert status == 200
    assert worker_log_errors(mrope) == []


async def test_ollama_and_anthropic_routes_send_the_image_and_answer_as_the_chat(http, mrope):
    """The same image through Ollama's /api/chat (`images`, base64) and Anthropic's /v1/messages (an image block):
    each answer is OpenAI chat's, greedy."""
    blue = base64.b64encode(picture("blue")).decode()
    status, chat = await ask_chat(http, mrope.url, image_message(picture("blue")))
    assert status == 200, chat
    async with http.get(mrope.url + "/v1/models") as response:
        model = (await response.json())["data"][0]["id"]
    ollama = {"model": model, "stream": False, "options": {"temperature": 0, "num_predict": 12},
              "messages": [{"role": "user", "content": QUESTION, "images": [blue]}]}
    async with http.post(mrope.url + "/api/chat", json=ollama) as response:
        assert response.status == 200, await response.text()
        assert (await response.json())["message"]["content"] == completion_text(chat)
    anthropic = {"model": model, "max_tokens": 12, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": blue}},
        {"type": "text", "text": QUESTION}]}]}
    async with http.post(mrope.url + "/v1/messages", json=anthropic) as response:
        assert response.status == 200, await response.text()
        assert (await response.json())["content"][0]["text"] == completion_text(chat)
