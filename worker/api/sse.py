"""Server-sent events: `data: <json>` lines, ending with `data: [DONE]`."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

DONE = b"data: [DONE]\n\n"


def encode(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def open_stream(request: web.Request, status: int = 200,
                      headers: dict[str, str] | None = None) -> web.StreamResponse:
    response = web.StreamResponse(status=status, headers={
        "Content-Type": "text/event-stream",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",  # proxies must not hold tokens back
        "X-Request-Id": request["request_id"],
        **(headers or {}),
    })
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, payload: Any) -> None:
    await response.write(encode(payload))


async def send_named(response: web.StreamResponse, events: list[dict[str, Any]]) -> None:
    """Events each named by its type on an `event:` line, as Anthropic's and the Responses API's clients expect."""
    if events:
        await response.write(b"".join(f"event: {e['type']}\n".encode() + encode(e) for e in events))
