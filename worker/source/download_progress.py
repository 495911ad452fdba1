"""Download progress: huggingface_hub's own bar on a terminal, and throttled events in the logs."""

from __future__ import annotations

import time
from typing import Any

import structlog
from huggingface_hub.utils import tqdm as hf_tqdm

log = structlog.get_logger(__name__)

LOG_EVERY_S = 2.0


class DownloadProgress(hf_tqdm):
    """A tqdm that huggingface_hub drives. It shows itself where huggingface_hub would (a terminal,
    HF_HUB_DISABLE_PROGRESS_BARS unset); where it doesn't, it logs `download_progress` events instead,
    at most every LOG_EVERY_S, so JSON logs see the download too. The last event is always logged."""

    file = ""  # set per download by for_file()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["desc"] = self.file  # huggingface_hub's own label is the tail of the URL
        super().__init__(*args, **kwargs)
        self._bytes = kwargs.get("initial", 0)
        self._bytes_total = kwargs.get("total")
        self._next_log = 0.0

    def update(self, n: float | None = 1) -> bool | None:
        self._bytes += n or 0
        now = time.monotonic()
        shown = not self.disable  # a bar on the terminal already says it; log lines would break it up
        if (now >= self._next_log and not shown) or self._bytes == self._bytes_total:
            self._next_log = now + LOG_EVERY_S
            log.info("download_progress", stage="download", file=self.file, done=int(self._bytes),
                     total=self._bytes_total)
        return super().update(n)

    @classmethod
    def for_file(cls, name: str) -> type[DownloadProgress]:
        # huggingface_hub takes a class, not an instance: a subclass carries the name.
        return type(cls.__name__, (cls,), {"file": name})
