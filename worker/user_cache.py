"""The user cache: a stable folder, atomic writes, content hashes."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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


def content_sha256(path: Path) -> str:
    """The file's sha256: a blob of this cache's content-addressed store (package.py) is named by it, verified
    before it was stored; any other file is read and hashed (0.13 s for the 98 MB test model here)."""
    blob = path.resolve()
    if blob.parent.parent == (cache_dir() / "blobs").resolve() and re.fullmatch("[0-9a-f]{64}", blob.parent.name):
        return blob.parent.name
    return sha256_of(path)


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
    """Write to a temp file beside `target`, rename over it only if the block succeeds, durably (fsync).

    A crash, a kill -9 or an exception leaves no half-written file under the final name (a kill leaves the temp
    file: `.NAME.*.part`).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name is: a power cut leaves no empty file
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (POSIX syncs a rename through the folder's own entry)."""
    with suppress(OSError):  # a folder that cannot be opened or synced (Windows, some network filesystems)
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
