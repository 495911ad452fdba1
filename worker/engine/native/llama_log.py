"""Route llama.cpp's own log lines into structlog, and keep the last error for messages."""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import llama_cpp
import structlog

log = structlog.get_logger("llama.cpp")

# ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT (continues the previous line)
_LEVELS = {0: "debug", 1: "debug", 2: "debug", 3: "warning", 4: "error"}
_CONT = 5

recent_errors: deque[str] = deque(maxlen=8)
_partial: list[str] = []
_level = [0]
_listeners: list[Callable[[str], None]] = []


@llama_cpp.llama_log_callback
def _on_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    if level != _CONT:
        _level[0] = level
    _partial.append(text.decode("utf-8", errors="replace"))
    if not _partial[-1].endswith("\n"):
        return  # llama.cpp writes some lines in pieces
    line = "".join(_partial).strip()
    _partial.clear()
    if not line:
        return
    for listener in _listeners:
        listener(line)
    method = _LEVELS.get(_level[0], "debug")
    if method == "error":
        recent_errors.append(line)
    getattr(log, method)(line)


def install() -> None:
    llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))


def install_mtmd(setter: Callable[[Any, ctypes.c_void_p], None]) -> None:
    """libmtmd's lines (its clip encoder's too) go the same way: it has a setter of its own
    (mtmd_cpp.mtmd_helper_log_set), and llama_log_set does not reach it."""
    setter(_on_log, ctypes.c_void_p(0))


def last_error(default: str) -> str:
    """The most telling recent error: llama.cpp's "error loading model: <why>" beats its generic last line."""
    for line in reversed(recent_errors):
        _, found, why = line.partition("error loading model: ")
        if found:
            return why
    return recent_errors[-1] if recent_errors else default


@contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """Also hand each whole llama.cpp log line to `listener` (e.g. to follow the quantizer's progress)."""
    install()
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
