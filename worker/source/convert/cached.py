"""Converted models in the user cache: keyed by their inputs, written atomically, one writer at a time
(docs/models.md, "SafeTensors models").
"""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from worker.progress_callback import ProgressFn
from worker.source.convert.folder import input_signature
from worker.source.convert.types import Conversion
from worker.user_cache import atomic_path, cache_dir

log = structlog.get_logger(__name__)

# Bump when a change to the converter changes its output: old cache entries then stop matching.
CONVERTER_VERSION = "1"


def converted_dir() -> Path:
    return cache_dir() / "converted"


def _key(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


@contextmanager
def _locked(key: str) -> Iterator[None]:
    lock_path = converted_dir() / ".locks" / f"{key}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting_for_conversion", lock=str(lock_path), reason="another process is making this file")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cached(target: Path, key: str, make: Callable[[Path], None]) -> Path:
    if target.is_file():  # only finished files are ever renamed into place
        log.info("converted_cache_hit", path=str(target))
        return target
    with _locked(key):
        if target.is_file():  # made by the process we waited for
            log.info("converted_cache_hit", path=str(target))
            return target
        # Holding the lock, any temp file of this target is a killed writer's: remove it.
        for stale in target.parent.glob(f".{target.name}.*.part"):
            stale.unlink(missing_ok=True)
        with atomic_path(target) as tmp:
            make(tmp)
    return target


def converted_model(folder: Path, conversion: Conversion = Conversion(), progress: ProgressFn | None = None) -> Path:
    """The GGUF of a Hugging Face folder, converted (and quantized) once, then served from the cache.

    The key hashes what the conversion reads (config and tokenizer files whole, each weights file's header and size),
    the converter's version and the output type: an edited folder converts again, an unchanged one is reused at once.
    A flock per key makes a second worker asking for the same model wait for the first one's file, not convert too."""
    folder = folder.resolve()
    parts = [p for name, data in input_signature(folder) for p in (name, data)]
    key = _key(CONVERTER_VERSION, conversion.out_type, *parts)
    target = converted_dir() / f"{folder.name}-{key[:16]}.{conversion.out_type}.gguf"

    def convert(tmp: Path) -> None:
        from worker.source.convert.write import convert_folder  # gguf-py: only when a conversion runs, not on a hit

        convert_folder(folder, tmp, conversion.out_type, progress)

    path = _cached(target, key, convert)
    quantize, quantize_model = conversion.quantize, conversion.quantizer
    if quantize is None:
        return path
    if quantize_model is None:
        raise ValueError(f"quantizing to {quantize} needs a Conversion with a quantizer (the engine's quantize_model)")
    qkey = _key(key, quantize)
    qtarget = converted_dir() / f"{folder.name}-{qkey[:16]}.{quantize}.gguf"
    return _cached(qtarget, qkey, lambda tmp: quantize_model(path, tmp, quantize, progress))
