"""Download progress: huggingface_hub's own bar on a terminal, and throttled events in the logs."""

from __future__ import annotations

import time

import structlog
from huggingface_hub.utils import tqdm as hf_tqdm

log = structlog.get_logger(__name__)

LOG_EVERY_S = 2.0


class DownloadProgress(hf_tqdm):
    """A tqdm that huggingface_hub drives; it shows itself only where huggingface_hub would (a terminal,
    HF_HUB_DISABLE_PROGRESS_BARS unset) but always logs `download_progress`, so JSON logs see it too."""

    file = ""  # set per download by for_file(); huggingface_hub's own label is the URL

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._bytes = kwargs.get("initial", 0)
        self._bytes_total = kwargs.get("total")
        self._next_log = 0.0

    def update(self, n: float | None = 1) -> bool | None:
        self._bytes += n or 0
        now = time.monotonic()
        if now >= self._next_log or self._bytes == self._bytes_total:
            self._next_log = now + LOG_EVERY_S
            log.info("download_progress", stage="download", file=self.file, done=int(self._bytes),
                     total=self._bytes_total)
        return super().update(n)

    @classmethod
    def for_file(cls, name: str) -> type[DownloadProgress]:
        # huggingface_hub takes a class, not an instance: a subclass carries the name.
        return type(cls.__name__, (cls,), {"file": name})
