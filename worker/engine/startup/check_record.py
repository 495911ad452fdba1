"""The load-time check's answer and the draft passes' costs, kept for the next start that would measure the same thing:
the same model and adapter files, flags, llama.cpp libraries, ggml switches, CPU and worker code (kv/fingerprint.py's
parts, and the rest of the flags but those that reach neither the check nor the context it decodes in). A restart (a
pool manager's, a developer's, a test's) then skips the check, ~1.2 s of a 4 s start on 2 cores, and the passes'
timing, ~1 s more; change any of them and it measures again. On the CPU backend alone, where the check's yes is
trusted (load_check.py): a GPU's kernels also depend on its device and driver, which the fingerprint does not name."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import structlog

from worker.engine.config import EngineConfig
from worker.engine.kv.fingerprint import Fingerprint, file_identity, numerics_parts
from worker.engine.native.model import LlamaModel
from worker.engine.startup.load_check import Numerics
from worker.user_cache import atomic_file, cache_dir

log = structlog.get_logger(__name__)
T = TypeVar("T")

RECORDS_ENV = "LLM_WORKER_CHECKS"  # the folder of records; unset: load-checks/ in the user cache
CHECK, PASSES = "", ".passes"  # what a record holds, by the end of its name: the check's answer, the passes' costs
WORKER = Path(__file__).resolve().parents[2]
# Flags that reach neither the check nor the context it decodes in (native/model.py): the request queue, the host and
# disk stores of cells, the reasoning split, the pooled contexts of /v1/embeddings, the least draft worth verifying.
# A start that changes only these measures what the last one did.
UNCHECKED = ("max_queue", "cache_ram", "kv_dir", "kv_dir_mib", "reasoning_format", "embeddings", "pooling", "draft_min")
_DEFAULTS = EngineConfig()


def records_dir() -> Path:
    return Path(os.environ.get(RECORDS_ENV) or cache_dir() / "load-checks")


def check_key(model: LlamaModel) -> str | None:
    """What decides the loaded model's check, hashed; None where no record is kept (not the CPU backend alone)."""
    config = model.config
    if not config.on_cpu_alone:
        return None
    # The context as made: --ctx-size 8192, 0 and none give the same one on a model trained on 8,192 tokens.
    return key_of(dataclasses.replace(config, ctx_size=model.n_ctx), [model.path], numerics_parts(model))


def key_of(config: EngineConfig, files: list[Path], numerics: dict[str, str]) -> str:
    """The record's name: the files by path, size and time (hashing a multi-gigabyte model would cost more than the
    check), every flag but UNCHECKED, the worker's code, and the numerics' parts."""
    files = [*files, *(path for path in (config.model_draft, config.mmproj) if path), *(a.path for a in config.lora)]
    return Fingerprint.of({**numerics, "files": ";".join(file_identity(path) for path in files),
                           "config": repr(_checked(config)), "code": _code_digest()}).digest


def _checked(config: EngineConfig) -> EngineConfig:
    """The flags the check's answer depends on: UNCHECKED at their defaults, and the drafts the engine starts with
    (--spec-type auto and ngram draft alike where rows are kept apart) in place of the flag that asked for them."""
    return dataclasses.replace(config, spec_type=config.drafting,
                               **{name: getattr(_DEFAULTS, name) for name in UNCHECKED})


def recorded_or(key: str | None, measure: Callable[[], Numerics]) -> Numerics:
    """The answer recorded under `key`, else measure()'s, recorded under it."""
    if (found := recorded(key)) is not None:
        return found
    measured = measure()
    record(key, measured)
    return measured


def recorded(key: str | None) -> Numerics | None:
    """The answer a start with this key measured; None where there is none or it cannot be read (measure again)."""
    if key is None or (found := _read(key, CHECK, lambda data: Numerics(**data))) is None:
        return None
    log.info("load_check_reused", path=str(_path(key, CHECK)))
    return found


def record(key: str | None, numerics: Numerics) -> None:
    """Keep what the check measured for the next start with this key; a folder that cannot be written costs only
    that start's time."""
    if key is not None:
        _write(key, CHECK, dataclasses.asdict(numerics))


def recorded_passes(key: str | None) -> dict[int, float] | None:
    """The seconds a draft pass of each row count took at a start with this key (Speculator.time_passes_at_load); None
    where there is none or it cannot be read (time them again)."""
    return None if key is None else _read(key, PASSES, _pass_seconds)


def record_passes(key: str | None, seconds: dict[int, float]) -> None:
    """Keep the draft passes' costs for the next start with this key: a start that reuses them is ready ~1 s sooner
    on 2 cores. Called from the engine thread each time every row count has been timed (EngineLoop.measure_passes):
    at load, once idle where startup left some untimed, and when passes timed beside a busy process are timed again
    (PassCosts.timed_beside_load), so that the next start reuses the corrected costs."""
    if key is not None:
        _write(key, PASSES, {"seconds": {str(rows): cost for rows, cost in seconds.items()}})


def _pass_seconds(data: Any) -> dict[int, float]:
    seconds = {int(rows): float(cost) for rows, cost in data["seconds"].items()}
    if not seconds or min(seconds.values()) <= 0:
        raise ValueError("no pass, or a pass that took no time")
    return seconds


def _path(key: str, kind: str) -> Path:
    return records_dir() / f"{key}{kind}.json"


def _read(key: str, kind: str, parse: Callable[[Any], T]) -> T | None:
    path = _path(key, kind)
    try:
        return parse(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:  # cut short, or of another shape
        log.warning("load_check_record_unreadable", path=str(path), error=str(error), fix="measured again")
        return None


def _write(key: str, kind: str, data: dict[str, Any]) -> None:
    path = _path(key, kind)
    try:
        with atomic_file(path) as out:
            out.write(json.dumps(data).encode())
    except OSError as error:
        log.warning("load_check_not_recorded", path=str(path), error=str(error))


@cache
def _code_digest() -> str:
    """The worker's own code: the check, and every choice of kernels, cells and flags behind it."""
    digest = hashlib.sha256()
    for source in sorted(WORKER.rglob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()
