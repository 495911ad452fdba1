"""The asyncio side of one request: an async iterator of events, and cancel()."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from worker.engine.requests import Event, Finished


class RequestHandle:
    def __init__(self, cancel: Callable[[], None]) -> None:
        self._cancel = cancel  # asks the engine thread to end this request's sequence
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self.finished: Finished | None = None

    def push(self, event: Event) -> None:
        """Called on the event loop by the engine's dispatcher."""
        self._events.put_nowait(event)

    def cancel(self) -> None:
        """Stop generating; the slot is freed at the engine's next step. Idempotent."""
        if self.finished is None:
            self._cancel()

    def __aiter__(self) -> RequestHandle:
        return self

    async def __anext__(self) -> Event:
        if self.finished is not None:
            raise StopAsyncIteration
        event = await self._events.get()
        if isinstance(event, Finished):
            self.finished = event
        return event
