"""The ready callback: POST once to the manager, retrying while it is not up yet."""

from __future__ import annotations

import asyncio
import os
import random

import aiohttp
import structlog

log = structlog.get_logger(__name__)

TOKEN_ENV = "LLORCH_API_TOKEN"


def auth_headers() -> dict[str, str]:
    token = os.environ.get(TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


async def post_ready(url: str, body: dict, give_up_after: float = 60.0) -> bool:
    """Retry connection errors and 5xx with jittered exponential backoff; a 4xx is final.

    Returns whether the manager took it. The worker keeps serving either way.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_after
    delay, attempt = 0.25, 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while True:
            attempt += 1
            try:
                async with session.post(url, json=body, headers=auth_headers()) as response:
                    if response.status < 300:
                        log.info("ready_callback_sent", url=url, attempt=attempt, status=response.status)
                        return True
                    if response.status < 500:
                        log.error("ready_callback_refused", url=url, status=response.status)
                        return False
                    reason = f"HTTP {response.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                reason = str(exc) or type(exc).__name__
            if loop.time() + delay > deadline:
                log.error("ready_callback_gave_up", url=url, attempts=attempt, reason=reason)
                return False
            log.warning("ready_callback_retry", url=url, attempt=attempt, reason=reason, retry_in_s=round(delay, 2))
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 5.0)
