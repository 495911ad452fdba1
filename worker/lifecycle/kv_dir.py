"""--kv-dir from the lifecycle's side: the engine's reusable cells written to disk every --kv-dir-interval seconds
while it serves, and once more on drain, after the admitted requests finished and before the engine stops, so that
the worker that replaces this one starts with them (engine/kv/disk_cache.py)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from worker.engine import ServedModel

log = structlog.get_logger(__name__)


async def persist(served: ServedModel) -> None:
    """One write; a failure (a full disk, a folder gone) is logged, never fatal: the cells are only a head start."""
    try:
        await served.cells.persist()
    except (OSError, MemoryError) as exc:
        log.warning("kv_dir_write_failed", reason=str(exc) or type(exc).__name__)


async def persist_every(served: ServedModel, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        await persist(served)
