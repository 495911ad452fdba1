"""Images decoded whole with non-causal attention (Gemma 3 and 4): a worker serving the test model with a gemma3
projector (tests/gemma3_helpers.py) answers as llama.cpp's own helper does, decoding each image in one call with
causal attention off, and keeps exact mode's promise: the same text from the cache, in the next turn and beside other
streams as with --prefix-cache off, and where a prefill chunk's budget ends inside an image."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import start_worker
from tests.gemma3_helpers import IMAGE_SIZE, IMAGE_TOKENS, build_gemma3_projector
from tests.helpers import ask_chat, completion_text
from tests.mrope_helpers import MARKER, N_CTX, chat_prompt, libmtmd_answer
from tests.vision_helpers import COLOURS, QUESTION, image_message, png

SLOT = ("--ctx-size", str(4 * N_CTX), "--parallel", "4")  # N_CTX cells a slot, as libmtmd_answer's context
UBATCH = 64  # the smallest --ubatch-size: a prefill chunk of 64 tokens, which the test below makes end in an image


@pytest.fixture(scope="module")
def projector(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_gemma3_projector(model_path, tmp_path_factory.mktemp("gemma3") / "mmproj-gemma3-colours.gguf")


@pytest.fixture(scope="module")
def gemma3(projector: Path, tmp_path_factory: pytest.TempPathFactory):
    worker = start_worker(tmp_path_factory.mktemp("gemma3-worker"), "--mmproj", str(projector), *SLOT)
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def picture(colour: str) -> bytes:
    return png(COLOURS[colour], IMAGE_SIZE, IMAGE_SIZE)


@pytest.mark.parametrize("colour", ["red", "blue"])
async def test_the_model_names_the_colour_and_answers_as_llama_cpp_s_own_helper(http, gemma3, projector, model_path,
                                                                                colour):
    """Decoded causally, the blue image reads "The image is a classic example of a color wheel" (gemma3_helpers.py):
    the answer, byte for byte llama.cpp's helper's under exact mode's numerics, shows the image attended both ways."""
    status, body = await ask_chat(http, gemma3.url, image_message(picture(colour)))
    assert status == 200, body
    answer = completion_text(body)
    assert colour in answer.lower() and not any(other in answer.lower() for other in COLOURS if other != colour)
    expected = await asyncio.to_thread(libmtmd_answer, model_path, projector, picture(colour),
                                       chat_prompt(model_path, MARKER + QUESTION), 12, exact=True)
    assert answer == expected
    assert body["usage"]["prompt_tokens"] > IMAGE_TOKENS


async def test_the_next_turn_and_streams_beside_answer_as_with_no_cache(http, gemma3, projector, tmp_path):
    first = image_message(picture("blue"), text="Which colour is shown? Answer with one word, then say why.")
    texts = [[{"role": "user", "content": f"Write a short story about a {animal}."}] for animal in ("cat", "robot")]
    together = await asyncio.gather(ask_chat(http, gemma3.url, first, max_tokens=16),
                                    *(ask_chat(http, gemma3.url, messages, max_tokens=32) for messages in texts))
    assert all(status == 200 for status, _ in together), together
    turn_one = together[0][1]
    second = [*first, {"role": "assistant", "content": completion_text(turn_one)},
              {"role": "user", "content": "And what colour is the sky on a clear day?"}]
    status, turn_two = await ask_chat(http, gemma3.url, second, max_tokens=16)
    assert status == 200, turn_two
    assert turn_two["usage"]["prompt_tokens_details"]["cached_tokens"] > turn_one["usage"]["prompt_tokens"] // 2
    cold = start_worker(tmp_path, "--mmproj", str(projector), "--prefix-cache", "off", *SLOT)
    try:
        for messages, warm, max_tokens in ((first, turn_one, 16), (second, turn_two, 16),
                                           (texts[0], together[1][1], 32), (texts[1], together[2][1], 32)):
            status, body = await ask_chat(http, cold.url, messages, max_tokens=max_tokens)
            assert status == 200 and completion_text(body) == completion_text(warm), (body, warm)
    finally:
        assert cold.stop() == 0, cold.log()[-3000:]


async def test_an_image_the_step_budget_would_cut_is_decoded_whole(http, gemma3, projector, model_path, tmp_path):
    """With 64-token prefill chunks and the image's first token 1..3 before a multiple of 64, the budget's chunk
    would end inside the image: the chunk stops before it and the next takes it whole, and the answer is llama.cpp's
    helper's (decoded in two calls, its first tokens would not see its last)."""
    for words in range(100):
        system = "Answer briefly." + " ok" * words
        before = chat_prompt(model_path, MARKER, system).split(MARKER)[0] + "<start_of_image>"  # mtmd's text before it
        async with http.post(gemma3.url + "/tokenize", json={"content": before}) as response:
            start = len((await response.json())["tokens"])
        if start % UBATCH > UBATCH - IMAGE_TOKENS:
            break
    assert start % UBATCH > UBATCH - IMAGE_TOKENS, start
    messages = [{"role": "system", "content": system}, *image_message(picture("blue"))]
    worker = start_worker(tmp_path, "--mmproj", str(projector), "--ubatch-size", str(UBATCH), *SLOT)
    try:
        status, body = await ask_chat(http, worker.url, messages)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    assert status == 200, body
    expected = await asyncio.to_thread(libmtmd_answer, model_path, projector, picture("blue"),
                                       chat_prompt(model_path, MARKER + QUESTION, system), 12, exact=True)
    assert completion_text(body) == expected


def test_a_projector_whose_images_exceed_the_micro_batch_is_one_line_naming_the_size(model_path, tmp_path):
    """A 768-pixel gemma3 image is 24 x 24 = 576 tokens, decoded whole: more than the default micro-batch (256 on
    the cpu backend), which llama.cpp would abort on (llama_decode asserts a non-causal batch fits one)."""
    large = build_gemma3_projector(model_path, tmp_path / "mmproj-gemma3-large.gguf", image_size=768)
    worker = start_worker(tmp_path, "--mmproj", str(large), wait=False)
    assert worker.process.wait(timeout=120) != 0
    assert "its 576 tokens must fit one micro-batch; set --ubatch-size 576 or more (now 256)" in worker.log()
