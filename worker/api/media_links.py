"""Images named by URL, read before a turn is prepared: http(s) fetched with aiohttp on the event loop (--media-urls),
file:// read under --media-path; every failure a problem naming the part, all of a request's reported together.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import unquote

import aiohttp

from worker.api.images import AudioInput, ImageInput, ImageLink, checked_image, too_big
from worker.api.problems import Reader
from worker.settings import MEDIA_MAX_REDIRECTS, MediaSettings

_CHUNK = 64 * 1024


async def read_links(images: tuple[ImageInput | ImageLink | AudioInput, ...],
                     media: MediaSettings) -> tuple[ImageInput | AudioInput, ...]:
    """`images` (and clips) with each link read and checked; InvalidRequest listing every link that could not be
    had."""
    ready = tuple(image for image in images if not isinstance(image, ImageLink))
    if len(ready) == len(images):  # no links: no session
        return ready
    r = Reader({})
    timeout = aiohttp.ClientTimeout(total=media.fetch_timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def read(image: ImageInput | ImageLink | AudioInput) -> ImageInput | AudioInput | None:
            if not isinstance(image, ImageLink):
                return image
            is_file = image.url.startswith("file://")
            data = await (_file(r, image, media) if is_file else _fetch(r, session, image, media))
            return None if data is None else checked_image(r, image.field, data, media)

        read_images = await asyncio.gather(*(read(image) for image in images))
    r.done()
    return tuple(image for image in read_images if image is not None)  # all of them, since r.done() passed


# Held to the limits as it happens: one total time limit (redirects and body included), MEDIA_MAX_REDIRECTS, and the
# body read in chunks and dropped once past --image-max-bytes, so a large (or endless) answer costs no more than that.
# What arrives is checked by its header as inline images are, whatever its content type says.
async def _fetch(r: Reader, session: aiohttp.ClientSession, link: ImageLink, media: MediaSettings) -> bytes | None:
    field, url = link.field, link.url
    try:
        # aiohttp refuses the redirect that makes its history max_redirects long: one more lets that many through
        async with session.get(url, max_redirects=MEDIA_MAX_REDIRECTS + 1) as response:
            if response.status != 200:
                r.problem(field, "a URL that answers 200", f"{field}: {url} answered HTTP {response.status} "
                          f"{response.reason or ''}".rstrip(), response.status)
                return None
            if response.content_length is not None and response.content_length > media.max_bytes:
                too_big(r, field, f"{response.content_length} bytes by its Content-Length", media)
                return None
            body = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                body += chunk
                if len(body) > media.max_bytes:  # stop reading: the rest may be endless
                    too_big(r, field, f"more than {media.max_bytes} bytes (reading stopped there)", media)
                    return None
            return bytes(body)
    except aiohttp.TooManyRedirects:
        r.problem(field, f"at most {MEDIA_MAX_REDIRECTS} redirects", f"{field}: {url} redirected more than "
                  f"{MEDIA_MAX_REDIRECTS} times", url)
    except TimeoutError:  # aiohttp's own timeouts are TimeoutErrors too
        r.problem(field, f"an image within {media.fetch_timeout:g} s", f"{field}: {url} timed out: the image did "
                  f"not arrive within {media.fetch_timeout:g} s; --media-fetch-timeout raises the limit", url)
    except (aiohttp.ClientError, ValueError) as why:  # refused connections, bad hosts, malformed URLs
        r.problem(field, "a URL this worker can fetch", f"{field}: {url} could not be fetched: "
                  f"{type(why).__name__}: {why}", url)
    return None


async def _file(r: Reader, link: ImageLink, media: MediaSettings) -> bytes | None:
    """A file:// URL's file, if it lies under --media-path once symlinks and .. are resolved. As llama-server reads
    them, file://cat.png is cat.png in that folder; file:///abs/path is read only if the path is inside it."""
    root = media.media_path
    assert root is not None  # images.py makes file:// links only under --media-path
    path = (root / unquote(link.url[len("file://"):])).resolve()  # root / "/abs" is "/abs": held to root below
    if not path.is_relative_to(root):
        r.problem(link.field, f"a file under {root}", f"{link.field}: {link.url} is outside the folder --media-path "
                  f"names ({root}), once symlinks and .. are resolved", link.url)
        return None
    if not path.is_file():
        r.problem(link.field, f"a file under {root}", f"{link.field}: {link.url}: there is no file {path}", link.url)
        return None
    size = path.stat().st_size
    if size > media.max_bytes:  # not read at all
        too_big(r, link.field, f"{size} bytes", media)
        return None
    return await asyncio.to_thread(Path.read_bytes, path)
