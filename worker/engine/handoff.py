"""Engine thread -> event loop: each step's events, handed over with a wake-up that keeps the GIL, so the engine
thread goes on to its next llama_decode (bench/probes/RESULTS.md, "The engine's hand-off to the event loop")."""

from __future__ import annotations

import asyncio
import ctypes
import os
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")

# loop.call_soon_threadsafe wakes the loop by a `send` on its self-pipe, which lets the GIL go: the loop's thread takes
# it and writes every stream's SSE while the engine thread waits to get it back. A write to a pipe of our own through
# libc keeps it, and the loop's thread gets the GIL inside the next llama_decode.
_libc = ctypes.PyDLL(None)  # this process's libc, called without letting the GIL go
_write = _libc.write
_write.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
_write.restype = ctypes.c_ssize_t


class Handoff(Generic[Item]):
    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Item], None]) -> None:
        self._loop = loop
        self._deliver = deliver
        self._pending: deque[Item] = deque()  # appended by the engine thread, popped by the loop's
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        # A full pipe (the loop has not run for 64 KiB of wake-ups) fails the write with EAGAIN: one is pending anyway.
        os.set_blocking(self._write_fd, False)
        # add_reader belongs to the loop's thread; this may run on another (load_model runs in an executor).
        loop.call_soon_threadsafe(loop.add_reader, self._read_fd, self._drain)

    def post(self, item: Item) -> None:
        """Engine thread: hand `item` to `deliver` on the loop's thread, in order."""
        if self._loop.is_closed():
            return
        self._pending.append(item)
        _write(self._write_fd, b"\0", 1)

    def _drain(self) -> None:
        try:
            os.read(self._read_fd, 65536)
        except BlockingIOError:  # another drain took the bytes; its items may be here still
            pass
        while self._pending:
            self._deliver(self._pending.popleft())

    def close(self) -> None:
        """After the engine thread stopped posting."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._close_on_loop)
        else:
            self._close_fds()

    def _close_on_loop(self) -> None:
        self._loop.remove_reader(self._read_fd)
        self._drain()
        self._close_fds()

    def _close_fds(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)
