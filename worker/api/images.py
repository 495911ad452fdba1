"""Images a request sends, inline (data: URLs, base64 blocks) or named by a URL the worker may read (media_links.py),
checked by their header before a single pixel is decoded; URLs refused unless the worker was started to read them
(docs/api.md, "Images by URL (off by default)"). And audio clips, sent inline as OpenAI's input_audio parts.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
import struct
from dataclasses import dataclass
from typing import Any

from worker.api.problems import Reader
from worker.engine import Media
from worker.settings import MediaSettings

FORMATS = "PNG, JPEG, GIF or BMP"
NO_FETCH = "this worker fetches no URLs (a worker that fetches what it is handed is a way into its network)"
_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[\w.+-]+)*)(?P<b64>;base64)?,",
                       re.ASCII)


@dataclass(frozen=True)
class ImageInput:
    """One image of a request, checked: where it was sent (for problems found later), its bytes and size."""

    field: str
    data: bytes
    width: int
    height: int


@dataclass(frozen=True)
class AudioInput:
    """One audio clip of a request, checked by its bytes and its format's header; its length is checked once
    decoded (the served model's prepare), where its samples are."""

    field: str
    data: bytes
    format: str  # as the request says it: wav, mp3 or flac


@dataclass(frozen=True)
class ImageLink:
    """An image a request names by a URL this worker may read: read (and then checked) before the turn is
    prepared, off the parser, since fetching waits on the network (media_links.py)."""

    field: str
    url: str


@dataclass(frozen=True)
class MediaIntake:
    """What a request's content may hold on this worker: its image settings, and the inputs its model takes."""

    settings: MediaSettings = dataclasses.field(default_factory=MediaSettings)
    modalities: tuple[str, ...] = ("text",)  # the engine's input_modalities

    def no_audio(self) -> str:
        """Why an audio part is refused: libmtmd hears audio only through an audio projector, and none is loaded."""
        why = ("the loaded projector (--mmproj) is a vision projector and takes no audio" if "image" in self.modalities
               else "this worker serves its model with no projector (--mmproj)")
        return (f"audio input is not supported: {why}; serve an audio model with its projector (Ultravox, "
                "Qwen2-Audio, Voxtral...) to send audio")


AUDIO_FORMATS = ("wav", "mp3", "flac")
AUDIO_PART = '{"type": "input_audio", "input_audio": {"data": BASE64, "format": "wav" or "mp3"}}'


def audio_from_part(r: Reader, field: str, part: Any, media: MediaSettings) -> AudioInput | None:
    """An input_audio part's {"data": base64, "format": ...}, its bytes within the limit and of the format it
    names; None (and a problem) for anything else."""
    if not isinstance(part, dict) or not isinstance(part.get("data"), str):
        r.problem(field, AUDIO_PART, f"{field} must be {{\"data\": BASE64, \"format\": ...}}", _short(part))
        return None
    kind, text = part.get("format"), part["data"]
    if kind not in AUDIO_FORMATS:
        r.problem(f"{field}.format", f"one of {', '.join(AUDIO_FORMATS)}",
                  f"{field}.format must be one of {', '.join(AUDIO_FORMATS)}", kind)
        return None
    data = _base64_bytes(r, f"{field}.data", text, media, "clip")
    if data is None:
        return None
    if len(data) > media.max_bytes:
        too_big(r, f"{field}.data", f"{len(data)} bytes", media, "clip")
        return None
    if audio_format(data) != kind:
        r.problem(f"{field}.data", f"a {kind} file", f"{field}.data is not a {kind} file (its first bytes are "
                  f"{data[:8]!r})", len(data))
        return None
    return AudioInput(field, data, kind)


def audio_format(data: bytes) -> str | None:
    """wav, mp3 or flac by the file's first bytes (an MP3 may start with its ID3 tag or a frame's sync bits)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    if data[:4] == b"fLaC":
        return "flac"
    return None


def image_from_url(r: Reader, field: str, url: Any, media: MediaSettings) -> ImageInput | ImageLink | None:
    """An image_url's url: a data: URL holding a base64 image, or an http(s) or file:// URL where `media` allows
    one (an ImageLink, read later). Anything else is a problem (None)."""
    if not isinstance(url, str):
        r.problem(field, "a data: URL", f"{field} must be a string: a data:image/...;base64,... URL", _short(url))
        return None
    if url.startswith(("http://", "https://")):
        if media.fetch_urls:
            return ImageLink(field, url)
        r.problem(field, "a data: URL", f"{field}: {NO_FETCH}; send the image inline as a data:image/png;base64,... "
                  "URL (or start the worker with --media-urls)", _short(url))
        return None
    if url.startswith("file:"):
        if media.media_path is not None and url.startswith("file://"):
            return ImageLink(field, url)
        r.problem(field, "a data: URL", f"{field}: {NO_FETCH}; send the image inline as a data:image/png;base64,... "
                  "URL (file:// URLs are read only under the folder --media-path names)", _short(url))
        return None
    found = _DATA_URL.match(url)
    if found is None or not found["b64"]:
        r.problem(field, "a data: URL", f"{field} must be a base64 data: URL (data:image/png;base64,...)", _short(url))
        return None
    return image_from_base64(r, field, url[found.end():], media)


def image_from_base64(r: Reader, field: str, text: Any, media: MediaSettings) -> ImageInput | None:
    """Base64 image bytes (Anthropic's image source, a data URL's payload), checked."""
    if not isinstance(text, str):
        r.problem(field, "base64 image data", f"{field} must be a base64 string", _short(text))
        return None
    data = _base64_bytes(r, field, text, media, "image")
    return None if data is None else checked_image(r, field, data, media)


def _base64_bytes(r: Reader, field: str, text: str, media: MediaSettings, what: str) -> bytes | None:
    """An image's or a clip's base64 text decoded, refused before decoding when it holds more than the byte limit;
    None (and a problem) for text too long or not base64."""
    if len(text) > media.max_bytes * 4 // 3 + 4:
        too_big(r, field, f"{len(text) * 3 // 4} bytes", media, what)
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        r.problem(field, f"base64 {'image' if what == 'image' else 'audio'} data", f"{field} is not valid base64",
                  _short(text))
        return None


def too_big(r: Reader, field: str, size: str, media: MediaSettings, what: str = "image") -> None:
    """An image (or clip) over the byte limit; `size` says how big it is, or how much was read before reading
    stopped."""
    r.problem(field, f"at most {media.max_bytes} bytes", f"{field}: the {what} is {size}, over the limit of "
              f"{media.max_bytes} bytes; --image-max-bytes raises it", media.max_bytes)


def checked_image(r: Reader, field: str, data: bytes, media: MediaSettings) -> ImageInput | None:
    """`data` as an image within the limits, by its header alone; None (and a problem) for anything else.

    stb_image (what libmtmd decodes with) allocates whatever a header claims: a 100 KB PNG can say 50,000 x 50,000
    and take 7.5 GB to decode, so the header decides before any decoding is done."""
    if len(data) > media.max_bytes:
        too_big(r, field, f"{len(data)} bytes", media)
        return None
    size = image_size(data)
    if size is None:
        r.problem(field, f"a {FORMATS} image", f"{field} is not a {FORMATS} image (its first bytes are "
                  f"{data[:8]!r})", len(data))
        return None
    width, height = size
    if width * height > media.max_pixels or width <= 0 or height <= 0:
        r.problem(field, f"1 <= width x height <= {media.max_pixels} pixels", f"{field} is {width} x {height} = "
                  f"{width * height} pixels; images of 1 pixel up to the limit of {media.max_pixels} pixels are "
                  f"accepted, and --image-max-pixels raises it ({len(data)} bytes were sent)", [width, height])
        return None
    return ImageInput(field, data, width, height)


def without_marker(text: str) -> str:
    """A text part as the prompt may hold it: the image marker only where the worker put an image."""
    return text.replace(Media.MARKER, "")


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, BMP or JPEG header; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data.startswith(b"BM") and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return width, abs(height)  # a negative height: rows stored top-down
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    return None


# Start-of-frame markers carry a JPEG's size; C4 (Huffman tables), C8 and CC (arithmetic coding) do not.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 9 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[pos + 5:pos + 9])
            return width, height
        (length,) = struct.unpack(">H", data[pos + 2:pos + 4])
        pos += 2 + length
    return None


def _short(value: Any) -> Any:
    """A value as a problem may echo it: an image's kilobytes of base64 cut to their start."""
    return value[:64] + "..." if isinstance(value, str) and len(value) > 64 else value
