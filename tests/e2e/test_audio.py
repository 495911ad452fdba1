"""Audio in: a worker serving the test model with the tone projector (tests/audio_helpers.py) answers what a clip
stands for (a low band of tones says red, a high band blue) on OpenAI's chat, streamed or not, and the Responses
API; reuses a clip's cells in the next turn with the same text as a worker without a prefix cache; refuses what it
cannot hear with a 400 naming each part and why, and serves on."""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path

import pytest

from tests.audio_helpers import AUDIO_COLOURS, AUDIO_TOKENS, audio_message, build_audio_projector, wav
from tests.conftest import WorkerProcess, start_worker
from tests.helpers import ask_chat, sse_events
from tests.vision_helpers import QUESTION, data_url, png

MAX_SECONDS = 40  # the worker's --audio-max-seconds: a 35-second clip fits, a 42-second one does not
QUESTION_PART = {"type": "text", "text": QUESTION}


SERVED = ("--parallel", "2", "--ctx-size", "2048")


@pytest.fixture(scope="module")
def projector(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_audio_projector(model_path, tmp_path_factory.mktemp("mmproj") / "mmproj-tones.gguf")


@pytest.fixture(scope="module")
def hearing(projector: Path, tmp_path_factory: pytest.TempPathFactory):
    """The test model hearing through the tone projector, clips held to MAX_SECONDS."""
    worker = start_worker(tmp_path_factory.mktemp("audio"), "--mmproj", str(projector), *SERVED,
                          "--audio-max-seconds", str(MAX_SECONDS))
    try:
        yield worker
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


async def ask(http, worker: WorkerProcess, messages: list[dict], **fields) -> tuple[int, dict]:
    return await ask_chat(http, worker.url, messages, **fields)


def names_only(answer: str, colour: str) -> bool:
    answer = answer.lower()
    return colour in answer and not any(other in answer for other in AUDIO_COLOURS.values() if other != colour)


async def test_models_and_props_say_the_worker_hears_audio(http, hearing):
    async with http.get(hearing.url + "/v1/models") as response:
        assert (await response.json())["data"][0]["input_modalities"] == ["text", "audio"]
    async with http.get(hearing.url + "/props") as response:
        assert (await response.json())["modalities"] == {"vision": False, "audio": True, "video": False}


@pytest.mark.parametrize("band", ["low", "high"])
async def test_the_model_names_the_colour_the_clip_stands_for(http, hearing, band):
    status, body = await ask(http, hearing, audio_message(wav(band)))
    assert status == 200, body
    assert names_only(body["choices"][0]["message"]["content"], AUDIO_COLOURS[band]), body
    assert body["usage"]["prompt_tokens"] > AUDIO_TOKENS  # the clip's tokens are in the prompt's count


async def test_a_clip_past_30_seconds_is_two_windows_of_tokens(http, hearing):
    """libmtmd cuts a clip into Whisper's 30-second windows, each a chunk of its own with the clip's id: the engine
    gives each piece stand-ins of its own, and the tone still reads."""
    status, body = await ask(http, hearing, audio_message(wav("high", seconds=35)))
    assert status == 200, body
    assert names_only(body["choices"][0]["message"]["content"], "blue"), body
    assert body["usage"]["prompt_tokens"] > 2 * AUDIO_TOKENS, body["usage"]


async def test_a_streamed_chat_and_the_responses_api_hear_it_too(http, hearing):
    body = {"messages": audio_message(wav("high")), "max_tokens": 12, "temperature": 0, "stream": True}
    async with http.post(hearing.url + "/v1/chat/completions", json=body) as response:
        assert response.status == 200
        events = await sse_events(response)
    assert events[-1] == "[DONE]"
    text = "".join(event["choices"][0]["delta"].get("content") or "" for event in events[:-1])
    assert names_only(text, "blue"), text
    clip = audio_message(wav("low"))[0]["content"][0]
    request = {"input": [{"role": "user", "content": [clip, {"type": "input_text", "text": QUESTION}]}],
               "max_output_tokens": 12, "temperature": 0}
    async with http.post(hearing.url + "/v1/responses", json=request) as response:
        answer = await response.json()
    assert response.status == 200, answer
    assert names_only(answer["output"][-1]["content"][0]["text"], "red"), answer


async def test_the_same_clip_next_turn_reuses_its_cells_and_answers_as_without_a_cache(http, hearing, projector,
                                                                                      tmp_path):
    """The clip is cached by its samples' hash: the next turn resending it starts from its cells, and exact mode's
    text equals a worker's with --prefix-cache off."""
    first = audio_message(wav("low"), text="Which colour is shown? Answer in a sentence.")
    status, body = await ask(http, hearing, first, max_tokens=24)
    assert status == 200, body
    turn = [*first, body["choices"][0]["message"], {"role": "user", "content": "And again?"}]
    status, cached = await ask(http, hearing, turn, max_tokens=24)
    assert status == 200, cached
    assert cached["usage"]["prompt_tokens_details"]["cached_tokens"] > AUDIO_TOKENS, cached["usage"]
    cold = start_worker(tmp_path, "--mmproj", str(projector), *SERVED, "--prefix-cache", "off")
    try:
        status, fresh = await ask(http, cold, turn, max_tokens=24)
    finally:
        assert cold.stop() == 0, cold.log()[-3000:]
    assert status == 200, fresh
    assert fresh["choices"][0]["message"]["content"] == cached["choices"][0]["message"]["content"]


async def test_every_bad_clip_is_a_400_naming_it_and_the_worker_serves_on(http, hearing):
    clip = audio_message(wav("low"))[0]["content"][0]
    as_mp3 = {"type": "input_audio", "input_audio": {**clip["input_audio"], "format": "mp3"}}
    not_base64 = {"type": "input_audio", "input_audio": {"data": "not base64!", "format": "wav"}}
    status, body = await ask(http, hearing, [{"role": "user", "content": [as_mp3, not_base64, QUESTION_PART]}])
    assert status == 400, body
    problems = {p["field"]: p["message"] for p in body["error"]["errors"]}
    assert "is not a mp3 file" in problems["messages[0].content[0].input_audio.data"], problems
    assert "not valid base64" in problems["messages[0].content[1].input_audio.data"], problems
    # Found once the request reads well: a picture this projector cannot see, a clip over --audio-max-seconds.
    image = {"type": "image_url", "image_url": {"url": data_url(png((255, 0, 0)))}}
    too_long = audio_message(wav("low", seconds=MAX_SECONDS + 2))[0]["content"][0]
    status, body = await ask(http, hearing, [{"role": "user", "content": [image, QUESTION_PART]}])
    assert status == 400 and "takes audio, not image" in body["error"]["message"], body
    status, body = await ask(http, hearing, [{"role": "user", "content": [too_long, QUESTION_PART]}])
    assert status == 400, body
    assert "lasts 42.0 s, over the limit of 40 s; --audio-max-seconds" in body["error"]["message"], body
    # One sample: libmtmd would abort the process on it (llama.cpp #27693).
    status, body = await ask(http, hearing, audio_message(one_sample_wav()))
    assert status == 400 and "shorter than a 10 ms frame" in body["error"]["message"], body
    status, body = await ask(http, hearing, audio_message(wav("high")))
    assert status == 200 and names_only(body["choices"][0]["message"]["content"], "blue"), body


def one_sample_wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(16000)
        clip.writeframes(b"\x20\x00")
    return out.getvalue()


async def test_voxtrals_own_stack_factor_serves(http, model_path, tmp_path):
    """Voxtral's stack factor, 4: the llama.cpp this worker links counted 187 tokens a window and built 188, and
    aborted on the first clip; patch 0010 counts in the graph's order (patches/README.md)."""
    projector = build_audio_projector(model_path, tmp_path / "mmproj-stack4.gguf", stack=4)
    worker = start_worker(tmp_path, "--mmproj", str(projector), *SERVED)
    try:
        status, body = await ask(http, worker, audio_message(wav("low")))
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    assert status == 200 and names_only(body["choices"][0]["message"]["content"], "red"), body
    read = [json.loads(line) for line in worker.log().splitlines() if '"images_read"' in line]
    assert [line["image_tokens"] for line in read] == [188], read  # ceil(3000 / 2 / 2 / 4): a window
