"""The user cache: a stable folder, atomic writes, content hashes."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

CACHE_ENV = "LLM_WORKER_CACHE"


def cache_dir() -> Path:
    """$LLM_WORKER_CACHE, else $XDG_CACHE_HOME/llm-worker, else ~/.cache/llm-worker."""
    if override := os.environ.get(CACHE_ENV):
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "llm-worker"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """A temp path beside `target` for a writer that wants a name, renamed over `target` only on success."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_file(target: Path) -> Iterator[IO[bytes]]:
    """Write to a temp file beside `target`, rename over it only if the block succeeds.

    A crash or an exception leaves no half-written file under the final name.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
