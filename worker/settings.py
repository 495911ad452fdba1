"""One frozen Settings, built once from flags and LLM_WORKER_* variables, validated once."""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass

from worker.engine import EngineConfig


@dataclass(frozen=True)
class Settings:
    model: str | None  # .gguf path, Hugging Face folder or models.toml alias; None: the registry's default
    model_ref: str | None  # the pool manager's name for the model; default: the served model id
    worker_id: str
    host: str = "127.0.0.1"
    port: int = 8080
    callback_url: str | None = None
    log_format: str = "console"
    log_level: str = "info"
    engine: EngineConfig = EngineConfig()
    convert_type: str = "f16"  # a Hugging Face folder's GGUF type (worker.source.convert.OUTPUT_TYPES)
    quantize: str | None = None  # then quantized by llama.cpp to this (worker.source.convert.QUANT_TYPES)


def settings_from_flags(flags: dict) -> Settings:
    """The CLI's flags (already range-checked by click) as one Settings."""
    engine_fields = {name: flags[name] for name in (
        "device", "n_gpu_layers", "ctx_size", "parallel", "batch_size", "ubatch_size", "max_queue",
    )}
    if flags["threads"] is not None:
        engine_fields["threads"] = flags["threads"]
    return Settings(
        model=flags["model"],
        model_ref=flags["model_ref"],
        worker_id=flags["worker_id"] or str(uuid.uuid4()),
        host=flags["host"],
        port=flags["port"],
        callback_url=flags["callback_url"],
        log_format=flags["log_format"] or ("console" if sys.stderr.isatty() else "json"),
        log_level=flags["log_level"],
        engine=EngineConfig(backend=flags["backend"].lower(), **engine_fields),
        convert_type=flags["convert_type"],
        quantize=flags["quantize"],
    )
