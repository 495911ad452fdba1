"""structlog setup: console lines on a terminal, JSON lines otherwise; request ids via contextvars."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from structlog.typing import EventDict, Processor

_bridge: list[logging.Handler] = []  # configure()'s handler for library records: none until it runs


def _one_line(_logger: Any, _method: str, event: EventDict) -> EventDict:
    """A library's message on one line, even when it wrote several."""
    event["event"] = " ".join(str(event["event"]).split())
    return event


def default_format() -> str:
    """Console lines for a person at a terminal, JSON for anything that collects logs."""
    return "console" if sys.stderr.isatty() else "json"


def configure(fmt: str | None, level: str) -> None:
    """`fmt` console or json; None: default_format()."""
    fmt = fmt or default_format()
    renderer = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # A library's stdlib records (huggingface_hub's download retries) rendered as our own events.
    bridge = logging.StreamHandler(sys.stderr)
    bridge.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, _one_line],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    ))
    bridge.setLevel(level.upper())  # the library's own level still applies first
    _bridge[:] = [bridge]
    bridge_library_logs()


def bridge_library_logs() -> None:
    """huggingface_hub's records through configure()'s bridge; again after its import (worker.source.hub, loaded
    for a hub model only), which gives its logger a plain stderr handler of its own."""
    if _bridge:
        library = logging.getLogger("huggingface_hub")
        library.handlers, library.propagate = list(_bridge), False
