"""Worker -> pool manager: the ready callback (retried until taken) and the heartbeat."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable

import aiohttp
import structlog

from worker import __version__
from worker.settings import ORCH_TOKEN_ENV
from worker.timefmt import utc_now

log = structlog.get_logger(__name__)

_TIMEOUT = aiohttp.ClientTimeout(total=10)


def auth_headers() -> dict[str, str]:
    token = os.environ.get(ORCH_TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


async def post_ready(url: str, body: dict, give_up_after: float) -> bool:
    """Retry connection errors and 5xx with jittered exponential backoff; a 4xx is final.

    Returns whether the manager took it. The worker keeps serving either way.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + give_up_after
    delay, attempt = 0.25, 0
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
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


def heartbeat_body(worker_id: str, model_id: str, device: int, port: int, status: str) -> dict:
    return {
        "worker": {"id": worker_id, "model_id": model_id, "device": device, "port": port, "status": status,
                   "implementation": "llm-worker", "version": __version__},
        "timestamp": utc_now("seconds"),
    }


async def send_heartbeat(session: aiohttp.ClientSession, url: str, body: dict) -> None:
    """One beat; a manager that is down or slow is logged, never fatal."""
    try:
        async with session.post(url, json=body, headers=auth_headers()) as response:
            if response.status >= 300:
                log.warning("heartbeat_refused", url=url, status=response.status)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        log.warning("heartbeat_failed", url=url, reason=str(exc) or type(exc).__name__)


async def heartbeat_loop(url: str, interval: float, body: Callable[[], dict]) -> None:
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
        while True:
            await send_heartbeat(session, url, body())
            await asyncio.sleep(interval)


async def final_heartbeat(url: str, body: dict) -> None:
    async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
        await send_heartbeat(session, url, body)
