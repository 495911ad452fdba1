"""Loading progress: stages reported from any thread, streamed to whoever asks on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Progress:
    stage: str
    done: int
    total: int

    def as_dict(self) -> dict:
        return asdict(self)


class LoadingProgress:
    """The latest stage and count; `report` is safe from loader threads, `updates` runs on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.latest: Progress | None = None
        self.finished = False
        self._changed = asyncio.Event()

    def report(self, stage: str, done: int, total: int) -> None:
        self._loop.call_soon_threadsafe(self._set, Progress(stage, done, total))

    def finish(self) -> None:
        self.finished = True
        self._changed.set()

    def _set(self, progress: Progress) -> None:
        if progress.stage != getattr(self.latest, "stage", None) or progress.done == progress.total:
            log.info("loading", **progress.as_dict())
        self.latest = progress
        self._changed.set()

    async def updates(self) -> AsyncIterator[Progress]:
        """Each new state, starting with the current one, until loading is over."""
        seen = None
        while True:
            if self.latest is not None and self.latest != seen:
                seen = self.latest
                yield seen
            if self.finished:
                return
            self._changed.clear()
            await self._changed.wait()
