"""Progress of long jobs (convert, quantize): a callback, a log line every tenth, a bar on a terminal."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click
import structlog

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar  # what click.progressbar returns

log = structlog.get_logger(__name__)



class ProgressReport:
    """A ProgressFn for convert and quantize (done and total count tensors) that logs `progress` events at each
    tenth and draws a bar when stderr is a terminal."""

    def __init__(self, bar: bool | None = None) -> None:
        self.bar_enabled = sys.stderr.isatty() if bar is None else bar
        self._bar: ProgressBar[int] | None = None
        self._stage: str | None = None
        self._logged_tenth = -1

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage:
            self._close_bar()
            self._stage, self._logged_tenth = stage, -1
            if self.bar_enabled:
                self._bar = click.progressbar(length=total, label=stage, file=sys.stderr)
                self._bar.__enter__()
        tenth = done * 10 // max(total, 1)
        if tenth != self._logged_tenth:
            self._logged_tenth = tenth
            log.info("progress", stage=stage, done=done, total=total)
        if self._bar is not None:
            self._bar.update(done - self._bar.pos)
        if done >= total:
            self._close_bar()

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None
