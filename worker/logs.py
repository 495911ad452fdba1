"""structlog setup: console lines on a terminal, JSON lines otherwise; request ids via contextvars."""

from __future__ import annotations

import logging
import sys

import structlog


class _ToStructlog(logging.Handler):
    """A library's stdlib log records (huggingface_hub's download retries) as events in our own format."""

    def emit(self, record: logging.LogRecord) -> None:
        message = " ".join(record.getMessage().split())  # one line, even when the library wrote several
        structlog.get_logger(record.name).log(record.levelno, message)


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
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    library = logging.getLogger("huggingface_hub")
    library.handlers, library.propagate = [_ToStructlog()], False
