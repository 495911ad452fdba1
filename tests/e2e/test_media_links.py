"""Images by URL: a worker started with --media-urls fetches http(s) images from a local server started here (never
the internet), one with --media-path reads file:// images under its folder and nowhere else, and every URL that
cannot be had is a 400 naming the part and why; audio parts are refused saying why. The colour projector
(tests/vision_helpers.py) makes the answers checkable: a fetched red image is answered "red"."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from aiohttp import web

from tests.conftest import WorkerProcess, start_worker
from tests.vision_helpers import COLOURS, build_projector, png

CHAT = "/v1/chat/completions"
QUESTION = "Which colour is shown?"
MAX_BYTES = 4096  # --image-max-bytes: a test PNG is ~100 bytes
FETCH_TIMEOUT = 2.0  # --media-fetch-timeout


class ImageServer:
    """A local HTTP server with an image, redirects, a slow answer, an endless body and the usual failures; it
    counts the bytes it got to send of the endless body."""

    def __init__(self) -> None:
        self.endless_sent = 0
        app = web.Application()
        app.router.add_get("/{colour}.png", self.image)
        app.router.add_get("/hop/{n}", self.hop)
        app.router.add_get("/slow", self.slow)
        app.router.add_get("/endless", self.endless)
        app.router.add_get("/declared-big", self.declared_big)
        app.router.add_get("/text", self.text)
        # A handler ends with its client: the slow answer, once the worker has given up on it, must not hold the
        # module's cleanup for the rest of its sleep (aiohttp waits for running handlers).
        self.runner = web.AppRunner(app, handler_cancellation=True)

    async def start(self) -> str:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    async def image(self, request: web.Request) -> web.Response:
        colour = COLOURS.get(request.match_info["colour"])
        if colour is None:
            raise web.HTTPNotFound()
        return web.Response(body=png(colour), content_type="image/png")

    async def hop(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        raise web.HTTPFound("/red.png" if n == 0 else f"/hop/{n - 1}")

    async def text(self, _request: web.Request) -> web.Response:
        return web.Response(text="hello, no image here")

    async def slow(self, _request: web.Request) -> web.Response:
        await asyncio.sleep(FETCH_TIMEOUT * 5)
        return web.Response(body=png(COLOURS["red"]), content_type="image/png")

    async def endless(self, request: web.Request) -> web.StreamResponse:
        """A PNG header, then zeros for ever (chunked, no Content-Length): only the byte limit ends the read."""
        response = web.StreamResponse(headers={"Content-Type": "image/png"})
        await response.prepare(request)
        chunk = png(COLOURS["red"])[:33] + b"\x00" * 65_503
        while True:
            await response.write(chunk)
            self.endless_sent += len(chunk)

    async def declared_big(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "image/png", "Content-Length": str(10 * 2**20)})
        await response.prepare(request)
        await response.write(png(COLOURS["red"]))
        return response


@pytest.fixture(scope="module")
async def server():
    images = ImageServer()
    url = await images.start()
    yield images, url
    await images.runner.cleanup()


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """red.png and blue.png inside; outside it, a secret image, reached by a symlink and by .. from inside."""
    root = tmp_path_factory.mktemp("media-root")
    inside = root / "inside"
    inside.mkdir()
    (inside / "red.png").write_bytes(png(COLOURS["red"]))
    (inside / "blue.png").write_bytes(png(COLOURS["blue"]))
    (inside / "big.png").write_bytes(png(COLOURS["red"]) + b"\x00" * MAX_BYTES)
    (root / "secret.png").write_bytes(png(COLOURS["green"]))
    os.symlink(root / "secret.png", inside / "link.png")
    return inside


@pytest.fixture(scope="module")
def linked(model_path: Path, media_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("linked")
    projector = build_projector(model_path, tmp / "mmproj-colours.gguf")
    worker = start_worker(tmp, "--mmproj", str(projector), "--parallel", "2", "--ctx-size", "1024",
                          "--media-urls", "--media-path", str(media_dir), "--media-fetch-timeout", str(FETCH_TIMEOUT),
                          "--image-max-bytes", str(MAX_BYTES))
    yield worker
    assert worker.stop() == 0, worker.log()[-3000:]


def url_message(*urls: str) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}]


async def ask(http, worker: WorkerProcess, messages: list[dict]) -> tuple[int, dict]:
    body = {"messages": messages, "max_tokens": 12, "temperature": 0}
    async with http.post(worker.url + CHAT, json=body) as response:
        return response.status, await response.json()


def answer(body: dict) -> str:
    return body["choices"][0]["message"]["content"].lower()


def problems(body: dict) -> dict[str, str]:
    return {p["field"]: p["message"] for p in body["error"]["errors"]}


async def test_a_fetched_image_is_seen_and_redirects_are_followed(http, linked, server):
    _, base = server
    status, body = await ask(http, linked, url_message(f"{base}/blue.png"))
    assert status == 200 and "blue" in answer(body) and "red" not in answer(body), body
    status, body = await ask(http, linked, url_message(f"{base}/hop/2"))  # two redirects, then red.png
    assert status == 200 and "red" in answer(body) and "blue" not in answer(body), body


async def test_every_url_that_cannot_be_had_is_a_400_naming_its_part_and_why(http, linked, server):
    images, base = server
    started = time.monotonic()
    status, body = await ask(http, linked, url_message(
        f"{base}/slow", f"{base}/endless", f"{base}/declared-big", f"{base}/missing.png", f"{base}/text",
        f"{base}/hop/9", "http://127.0.0.1:1/red.png"))
    elapsed = time.monotonic() - started
    assert status == 400, body
    found = problems(body)
    field = "messages[0].content[{}].image_url.url".format
    assert "timed out" in found[field(0)] and "--media-fetch-timeout" in found[field(0)], found
    assert f"over the limit of {MAX_BYTES} bytes; --image-max-bytes raises it" in found[field(1)], found
    assert "reading stopped there" in found[field(1)], found
    assert "10485760 bytes by its Content-Length" in found[field(2)], found
    assert "answered HTTP 404" in found[field(3)], found
    assert "is not a PNG, JPEG, GIF or BMP image" in found[field(4)], found
    assert "redirected more than 3 times" in found[field(5)], found
    assert "could not be fetched" in found[field(6)], found
    assert len(found) == 7, found
    # The fetches ran side by side, each held to the timeout: the slow one did not add its own 10 s.
    assert elapsed < FETCH_TIMEOUT * 3, elapsed
    # The endless body was dropped near the limit, not read on (socket buffers hold a few MB at most).
    await asyncio.sleep(0.5)
    assert images.endless_sent < 16 * 2**20, images.endless_sent
    status, body = await ask(http, linked, url_message(f"{base}/red.png"))
    assert status == 200 and "red" in answer(body), body


async def test_file_urls_are_read_under_media_path_only(http, linked, media_dir):
    status, body = await ask(http, linked, url_message("file://blue.png"))  # llama-server's relative form
    assert status == 200 and "blue" in answer(body) and "red" not in answer(body), body
    status, body = await ask(http, linked, url_message(f"file://{media_dir / 'red.png'}"))
    assert status == 200 and "red" in answer(body), body
    status, body = await ask(http, linked, url_message(
        "file://link.png", "file://../secret.png", "file:///etc/hostname", "file://nothing.png", "file://big.png"))
    assert status == 400, body
    found = problems(body)
    field = "messages[0].content[{}].image_url.url".format
    for i in range(3):
        assert "is outside the folder --media-path names" in found[field(i)], found
    assert "there is no file" in found[field(3)], found
    assert f"over the limit of {MAX_BYTES} bytes" in found[field(4)], found
    assert "green" not in body["error"]["message"]


async def test_a_responses_input_image_by_url_names_its_input_field(http, linked, server):
    _, base = server
    content = [{"type": "input_image", "image_url": f"{base}/missing.png"}, {"type": "input_text", "text": QUESTION}]
    async with http.post(linked.url + "/v1/responses", json={"input": [{"role": "user", "content": content}],
                                                             "max_output_tokens": 8}) as response:
        assert response.status == 400
        body = await response.json()
    assert "input[0].content[0].image_url.url" in problems(body), body
    content[0]["image_url"] = f"{base}/red.png"
    async with http.post(linked.url + "/v1/responses", json={"input": [{"role": "user", "content": content}],
                                                             "max_output_tokens": 8, "temperature": 0}) as response:
        assert response.status == 200
        assert "red" in (await response.json())["output"][0]["content"][0]["text"].lower()


AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZFZm10IA==", "format": "wav"}}


async def test_audio_is_refused_saying_the_projector_takes_none(http, linked, base_url):
    messages = [{"role": "user", "content": [AUDIO, {"type": "text", "text": "What is said?"}]}]
    status, body = await ask(http, linked, messages)
    assert status == 400, body
    message = problems(body)["messages[0].content[0]"]
    assert "audio input is not supported" in message and "vision projector and takes no audio" in message, message
    async with http.post(base_url + CHAT, json={"messages": messages, "max_tokens": 4}) as response:
        assert response.status == 400
        message = problems(await response.json())["messages[0].content[0]"]
    assert "audio input is not supported" in message and "no projector (--mmproj)" in message, message
    status, body = await ask(http, linked, [{"role": "user", "content": "Hi"}])
    assert status == 200, body
