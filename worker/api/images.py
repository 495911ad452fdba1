"""Images a request sends: read from data: URLs (or base64 blocks), their format and size read from the file's header,
and the limits held before a single pixel is decoded.

stb_image (what libmtmd decodes with) allocates whatever a header claims: a 100 KB PNG can say 50,000 x 50,000 and
take 7.5 GB to decode. So the header is read here first, and a file over MAX_IMAGE_BYTES or an image over
MAX_IMAGE_PIXELS is refused with the limits named. URLs are not fetched: a worker that fetches any URL it is handed is
a way into its network, so http(s) and file URLs get a 400 that says to send the image inline.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from dataclasses import dataclass
from typing import Any

from worker.api.problems import Reader
from worker.engine.prompt.media import MEDIA_MARKER

MAX_IMAGE_BYTES = 20 * 2**20  # OpenAI's limit for one image
# 40 MP: a 3 bytes-a-pixel decode of 120 MB before mtmd resizes it to the projector's size; a phone photo is 12-50 MP.
MAX_IMAGE_PIXELS = 40_000_000
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


def image_from_url(r: Reader, field: str, url: Any) -> ImageInput | None:
    """An image_url's url: a data: URL holding a base64 image. Anything else is a problem (None)."""
    if not isinstance(url, str):
        r.problem(field, "a data: URL", f"{field} must be a string: a data:image/...;base64,... URL", _short(url))
        return None
    if url.startswith(("http://", "https://", "file:")):
        r.problem(field, "a data: URL", f"{field}: {NO_FETCH}; send the image inline as a data:image/png;base64,... "
                  "URL", _short(url))
        return None
    found = _DATA_URL.match(url)
    if found is None or not found["b64"]:
        r.problem(field, "a data: URL", f"{field} must be a base64 data: URL (data:image/png;base64,...)", _short(url))
        return None
    return image_from_base64(r, field, url[found.end():])


def image_from_base64(r: Reader, field: str, text: Any) -> ImageInput | None:
    """Base64 image bytes (Anthropic's image source, a data URL's payload), checked."""
    if not isinstance(text, str):
        r.problem(field, "base64 image data", f"{field} must be a base64 string", _short(text))
        return None
    if len(text) > MAX_IMAGE_BYTES * 4 // 3 + 4:  # refused before decoding
        r.problem(field, f"at most {MAX_IMAGE_BYTES} bytes", f"{field}: the image is {len(text) * 3 // 4} bytes; "
                  f"at most {MAX_IMAGE_BYTES} are accepted", len(text) * 3 // 4)
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        r.problem(field, "base64 image data", f"{field} is not valid base64", _short(text))
        return None
    return checked_image(r, field, data)


def checked_image(r: Reader, field: str, data: bytes) -> ImageInput | None:
    size = image_size(data)
    if size is None:
        r.problem(field, f"a {FORMATS} image", f"{field} is not a {FORMATS} image (its first bytes are "
                  f"{data[:8]!r})", len(data))
        return None
    width, height = size
    if width * height > MAX_IMAGE_PIXELS or width <= 0 or height <= 0:
        r.problem(field, f"1 <= width x height <= {MAX_IMAGE_PIXELS} pixels", f"{field} is {width} x {height} = "
                  f"{width * height} pixels; images of 1 to {MAX_IMAGE_PIXELS} pixels are accepted "
                  f"({len(data)} bytes were sent)", [width, height])
        return None
    return ImageInput(field, data, width, height)


def without_marker(text: str) -> str:
    """A text part as the prompt may hold it: the image marker only where the worker put an image."""
    return text.replace(MEDIA_MARKER, "")


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
