"""Images before the projector sees them: read from data: URLs, sized from their headers, held to the limits; and a
prompt's image runs, stand-ins and the models.toml `mmproj` key. No model, no llama.cpp."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest

from tests.vision_helpers import data_url, png
from worker.api.images import ImageLink, MediaIntake, image_from_url, image_size
from worker.api.openai.request import parse_chat
from worker.api.problems import InvalidRequest, Reader
from worker.engine.media import MEDIA_MARKER, MediaSpan, runs, stand_ins, text_only
from worker.settings import IMAGE_MAX_BYTES, IMAGE_MAX_PIXELS, MediaSettings
from worker.source import load_registry
from worker.source.sources import HubSource, PathSource
from worker.worker_error import WorkerError


def read(url: object, media: MediaSettings = MediaSettings()) -> tuple[object, list[str]]:
    r = Reader({})
    image = image_from_url(r, "url", url, media)
    return image, [p.message for p in r.problems]


def test_each_format_is_sized_from_its_header():
    gif = b"GIF89a" + struct.pack("<HH", 31, 7) + b"\x00" * 8
    bmp = b"BM" + b"\x00" * 16 + struct.pack("<ii", 40, -30) + b"\x00" * 8
    jpeg = b"\xff\xd8" + b"\xff\xe0" + struct.pack(">H", 16) + b"\x00" * 14 + b"\xff\xc0" + struct.pack(
        ">HBHH", 17, 8, 480, 640) + b"\x00" * 8
    assert image_size(png((1, 2, 3), 5, 9)) == (5, 9)
    assert image_size(gif) == (31, 7)
    assert image_size(bmp) == (40, 30)
    assert image_size(jpeg) == (640, 480)
    assert image_size(b"RIFF....WEBPVP8 ") is None


def test_a_data_url_gives_its_bytes_and_size():
    image, problems = read(data_url(png((255, 0, 0), 8, 4)))
    assert problems == []
    assert image is not None and (image.width, image.height) == (8, 4)


def test_urls_are_not_fetched_and_say_what_to_send():
    for url in ("https://example.com/cat.png", "http://10.0.0.1/x.png", "file:///etc/passwd"):
        image, problems = read(url)
        assert image is None and "fetches no URLs" in problems[0] and "data:image/png;base64" in problems[0]
    assert "--media-urls" in read("https://example.com/cat.png")[1][0]
    assert "--media-path" in read("file:///etc/passwd")[1][0]


def test_urls_the_worker_may_read_become_links_read_later(tmp_path: Path):
    """--media-urls lets http(s) through and --media-path file://, each only its own scheme."""
    urls = MediaSettings(fetch_urls=True)
    assert read("https://example.com/cat.png", urls) == (ImageLink("url", "https://example.com/cat.png"), [])
    assert "--media-path" in read("file://cat.png", urls)[1][0]
    files = MediaSettings(media_path=tmp_path)
    assert read("file://cat.png", files) == (ImageLink("url", "file://cat.png"), [])
    assert "--media-urls" in read("http://10.0.0.1/x.png", files)[1][0]
    assert "fetches no URLs" in read("file:cat.png", files)[1][0]  # file: without // is no file URL


def test_bytes_that_are_not_an_image_are_named():
    _, problems = read(data_url(b"hello, not an image at all", "text/plain"))
    assert "is not a PNG, JPEG, GIF or BMP image" in problems[0]
    _, problems = read("data:image/png;base64,@@@not base64")
    assert "not valid base64" in problems[0]


def test_a_small_file_that_claims_gigapixels_is_refused_before_decoding():
    """50,000 x 50,000 in the header of a file of a few hundred bytes: stb_image would allocate 7.5 GB."""
    header = struct.pack(">IIBBBBB", 50_000, 50_000, 8, 2, 0, 0, 0)
    ihdr = struct.pack(">I", len(header)) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    bomb = b"\x89PNG\r\n\x1a\n" + ihdr + b"\x00" * 100
    _, problems = read(data_url(bomb))
    assert (f"50000 x 50000 = 2500000000 pixels; images of 1 pixel up to the limit of {IMAGE_MAX_PIXELS} pixels "
            "are accepted, and --image-max-pixels raises it") in problems[0]


def test_a_file_over_the_byte_limit_is_refused_with_the_limit():
    _, problems = read("data:image/png;base64," + "A" * (IMAGE_MAX_BYTES * 4 // 3 + 100))
    assert f"over the limit of {IMAGE_MAX_BYTES} bytes; --image-max-bytes raises it" in problems[0]


def test_the_limits_are_the_flags_values():
    """--image-max-bytes and --image-max-pixels: an 8 x 4 PNG of some 70 bytes passes the defaults and neither
    lowered limit."""
    image = png((255, 0, 0), 8, 4)
    assert read(data_url(image))[1] == []
    _, problems = read(data_url(image), MediaSettings(max_bytes=len(image) - 1))
    assert f"the image is {len(image)} bytes, over the limit of {len(image) - 1} bytes" in problems[0]
    _, problems = read(data_url(image), MediaSettings(max_pixels=31))
    assert "8 x 4 = 32 pixels; images of 1 pixel up to the limit of 31 pixels" in problems[0]


def test_chat_content_parts_put_a_marker_where_each_image_goes_and_list_every_bad_part():
    red, blue = data_url(png((255, 0, 0))), data_url(png((0, 0, 255)))
    chat = parse_chat({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Compare "}, {"type": "image_url", "image_url": {"url": red}},
        {"type": "text", "text": f" and {MEDIA_MARKER}"}, {"type": "image_url", "image_url": {"url": blue}}]}]},
        n_vocab=100)
    assert chat.messages[0]["content"] == f"Compare {MEDIA_MARKER} and {MEDIA_MARKER}"  # the text's own is dropped
    assert [image.field for image in chat.images] == ["messages[0].content[1].image_url.url",
                                                      "messages[0].content[3].image_url.url"]
    with pytest.raises(InvalidRequest) as refused:
        parse_chat({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}}, {"type": "audio"},
            {"type": "image_url", "image_url": {"url": data_url(b"GIF89a")}},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]}, n_vocab=100)
    assert [p.field for p in refused.value.problems] == ["messages[0].content[0].image_url.url",
                                                         "messages[0].content[1]",
                                                         "messages[0].content[2].image_url.url",
                                                         "messages[0].content[3]"]


@pytest.mark.parametrize("modalities,why", [(("text",), "with no projector (--mmproj)"),
                                            (("text", "image"), "is a vision projector and takes no audio")])
def test_an_audio_part_says_why_it_is_refused(modalities, why):
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    with pytest.raises(InvalidRequest) as refused:
        parse_chat({"messages": [{"role": "user", "content": [audio]}]}, n_vocab=100,
                   intake=MediaIntake(modalities=modalities))
    (problem,) = refused.value.problems
    assert problem.field == "messages[0].content[0]"
    assert problem.message.startswith("messages[0].content[0]: audio input is not supported: ")
    assert why in problem.message


def test_runs_cut_a_chunk_where_text_meets_an_image_and_images_meet():
    first, second = MediaSpan(2, 3, 3, None, 1), MediaSpan(5, 2, 2, None, 99)
    tokens = [10, 11, *stand_ins(1, 3), *stand_ins(99, 2), 12]
    spans = (first, second)
    assert runs(tokens, spans, 0, 8) == [(0, 2, None), (2, 5, first), (5, 7, second), (7, 8, None)]
    assert runs(tokens, spans, 3, 6) == [(3, 5, first), (5, 6, second)]
    assert text_only(tokens) == [10, 11, 12]


def test_stand_ins_are_the_same_for_the_same_pixels_and_never_a_token():
    """Position i of an image's run is -1 - (hash + i), of the hash's low 62 bits: a function of the pixels' hash
    alone, so the same picture sent again gives these very ids and its cells are found again."""
    assert stand_ins(12345, 4) == [-12346, -12347, -12348, -12349]
    # Another picture differs at every position, its first included: no prefix of one is taken for the other's.
    assert all(a != b for a, b in zip(stand_ins(12345, 4), stand_ins(12346, 4), strict=True))
    # A hash past 62 bits wraps instead of growing, and every id stays negative: never a text token (>= 0).
    assert stand_ins(2**64 - 1, 2) == [-(2**62), -1]
    assert all(token < 0 for token in stand_ins(2**64 - 1, 16))


def test_models_toml_mmproj_is_read_beside_the_file_or_from_the_hub(tmp_path: Path):
    extra = tmp_path / "models.toml"

    def mmproj(value: str) -> object:
        extra.write_text(f'[models.v]\nmmproj = {value}\n[models.v.source]\nkind = "path"\npath = "v.gguf"\n')
        return load_registry(extra).entries["v"].defaults.mmproj

    assert mmproj('"mmproj-v.gguf"') == PathSource(tmp_path / "mmproj-v.gguf")
    assert mmproj('"hf:o/r"') == HubSource("o/r")
    assert mmproj('"hf:o/r/mmproj-v-f16.gguf@v1"') == HubSource("o/r", file="mmproj-v-f16.gguf", revision="v1")
    with pytest.raises(WorkerError, match="mmproj must be the path of a projector GGUF"):
        mmproj("3")
    with pytest.raises(WorkerError, match=r"models.toml: model 'v': mmproj 'hf:o' is not a hub model name; write"):
        mmproj('"hf:o"')


def test_anthropic_image_blocks_become_markers_and_a_url_source_is_refused():
    from worker.api.anthropic.request import parse_messages

    blue = base64.b64encode(png((0, 0, 255))).decode()
    chat = parse_messages({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "See "}, {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": blue}}]}]})
    assert chat.messages[-1]["content"] == f"See {MEDIA_MARKER}"
    assert [image.field for image in chat.images] == ["messages[0].content[1].source.data"]
    with pytest.raises(InvalidRequest, match="fetches no URLs"):
        parse_messages({"max_tokens": 4, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]})


def test_responses_input_image_parts_become_chat_images():
    from worker.api.responses.request import parse_responses
    from worker.api.responses.store import ResponseStore
    from worker.engine import SamplingParams

    parsed = parse_responses({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Which?"}, {"type": "input_image", "image_url": data_url(png((0, 255, 0)))}]}]},
        n_vocab=100, defaults=SamplingParams(), max_choices=1, store=ResponseStore())
    assert parsed.chat.messages[-1]["content"] == f"Which?{MEDIA_MARKER}"
    assert len(parsed.chat.images) == 1 and parsed.chat.images[0].width == 64


def test_responses_text_parts_read_as_before_images_an_empty_list_included():
    from worker.api.responses.request import parse_responses
    from worker.api.responses.store import ResponseStore
    from worker.engine import SamplingParams

    parsed = parse_responses({"input": [{"role": "user", "content": "Hi"}, {"type": "function_call", "call_id": "c",
                                                                           "name": "f", "arguments": "{}"},
                                        {"type": "function_call_output", "call_id": "c", "output": []}]},
                             n_vocab=100, defaults=SamplingParams(), max_choices=1,
                             store=ResponseStore())
    assert parsed.chat.messages[-1] == {"role": "tool", "tool_call_id": "c", "content": ""}
