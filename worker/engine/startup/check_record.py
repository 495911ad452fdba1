"""The load-time check's answer, kept for the next start that would measure the same thing: the same model and
adapter files, flags, llama.cpp libraries, ggml switches, CPU and worker code (kv/fingerprint.py's parts, and the
rest of the flags). A restart (a pool manager's, a developer's, a test's) then skips the check, ~2 s of a 5 s start
on 2 cores; change any of them and it measures again. On the CPU backend alone, where the check's yes is trusted
(load_check.py): a GPU's kernels also depend on its device and driver, which the fingerprint does not name."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path

import structlog

from worker.engine.config import EngineConfig
from worker.engine.kv.fingerprint import Fingerprint, file_identity, numerics_parts
from worker.engine.native.model import LlamaModel
from worker.engine.startup.load_check import Numerics
from worker.user_cache import atomic_file, cache_dir

log = structlog.get_logger(__name__)

RECORDS_ENV = "LLM_WORKER_CHECKS"  # the folder of records; unset: load-checks/ in the user cache
WORKER = Path(__file__).resolve().parents[2]


def records_dir() -> Path:
    return Path(os.environ.get(RECORDS_ENV) or cache_dir() / "load-checks")


def check_key(model: LlamaModel) -> str | None:
    """What decides the loaded model's check, hashed; None where no record is kept (not the CPU backend alone)."""
    config = model.config
    if not config.on_cpu_alone:
        return None
    return key_of(config, [model.path], numerics_parts(model))


def key_of(config: EngineConfig, files: list[Path], numerics: dict[str, str]) -> str:
    """The record's name: the files by path, size and time (hashing a multi-gigabyte model would cost more than the
    check), every flag, the worker's code, and the numerics' parts."""
    files = [*files, *(path for path in (config.model_draft, config.mmproj) if path), *(a.path for a in config.lora)]
    return Fingerprint.of({**numerics, "files": ";".join(file_identity(path) for path in files),
                           "config": repr(config), "code": _code_digest()}).digest


def recorded_or(key: str | None, measure: Callable[[], Numerics]) -> Numerics:
    """The answer recorded under `key`, else measure()'s, recorded under it."""
    if (found := recorded(key)) is not None:
        return found
    measured = measure()
    record(key, measured)
    return measured


def recorded(key: str | None) -> Numerics | None:
    """The answer a start with this key measured; None where there is none or it cannot be read (measure again)."""
    if key is None:
        return None
    path = records_dir() / f"{key}.json"
    try:
        found = Numerics(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as error:  # a record cut short or of another shape: not trusted
        log.warning("load_check_record_unreadable", path=str(path), error=str(error), fix="measured again")
        return None
    log.info("load_check_reused", path=str(path))
    return found


def record(key: str | None, numerics: Numerics) -> None:
    """Keep what the check measured for the next start with this key; a folder that cannot be written costs only
    that start's time."""
    if key is None:
        return
    path = records_dir() / f"{key}.json"
    try:
        with atomic_file(path) as out:
            out.write(json.dumps(dataclasses.asdict(numerics)).encode())
    except OSError as error:
        log.warning("load_check_not_recorded", path=str(path), error=str(error))


@cache
def _code_digest() -> str:
    """The worker's own code: the check, and every choice of kernels, cells and flags behind it."""
    digest = hashlib.sha256()
    for source in sorted(WORKER.rglob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()
