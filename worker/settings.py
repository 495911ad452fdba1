"""One frozen Settings, built once from flags and LLM_WORKER_* variables, validated once."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from worker.engine.host import (
    CacheMode,
    EngineConfig,
    SpecType,
    config_attention,
    default_batch_size,
    default_ubatch_size,
    expects_batch_invariant,
)
from worker.logs import default_format
from worker.source.projector import projector_source
from worker.source.sources import ProjectorSource
from worker.worker_error import WorkerError

ORCH_TOKEN_ENV = "LLORCH_API_TOKEN"  # the pool manager's shared bearer token
IMAGE_MAX_BYTES = 20 * 2**20  # OpenAI's limit for one image
# 40 MP: a 3 bytes-a-pixel decode of 120 MB before mtmd resizes it to the projector's size; a phone photo is 12-50 MP.
IMAGE_MAX_PIXELS = 40_000_000
# 10 minutes: twenty of Whisper's 30-second windows, each a few hundred prompt tokens (docs/api.md, "Audio").
AUDIO_MAX_SECONDS = 600.0
MEDIA_FETCH_TIMEOUT = 10.0  # seconds for one image URL, as llama-server's
MEDIA_MAX_REDIRECTS = 3  # a CDN's redirect or two; a chain past it is refused rather than followed on


@dataclass(frozen=True)
class LoraRef:
    """A --lora value: a .gguf path, models.toml alias or hf: reference (fetched as --model is), and its scale."""

    ref: str
    scale: float = 1.0


@dataclass(frozen=True)
class MediaSettings:
    """Where a request's images may come from and how big they may be (--media-urls, --media-path, the limits).
    URLs are off by default: a worker that fetches what it is handed is a way into its network."""

    max_bytes: int = IMAGE_MAX_BYTES
    max_pixels: int = IMAGE_MAX_PIXELS
    fetch_urls: bool = False  # http(s) image URLs, fetched by the worker
    fetch_timeout: float = MEDIA_FETCH_TIMEOUT  # seconds for one URL, redirects and body included
    media_path: Path | None = None  # file:// URLs read only under this folder (resolved); None: refused
    max_audio_seconds: float = AUDIO_MAX_SECONDS  # a clip's length once decoded (its bytes: max_bytes)


@dataclass(frozen=True)
class Settings:
    model: str | None  # .gguf path, Hugging Face folder, models.toml alias or hf:owner/repo; None: the default
    model_ref: str | None  # the pool manager's name for the model; default: the served model id
    worker_id: str
    quant: str | None = None  # picks the GGUF of an hf:owner/repo model
    models_file: Path | None = None  # the user's models.toml, beside the shipped one
    host: str = "127.0.0.1"
    port: int = 8080
    callback_url: str | None = None
    callback_timeout: float = 60.0  # give up re-sending the ready callback after this long
    heartbeat_url: str | None = None
    heartbeat_interval: float = 10.0
    drain_timeout: float = 30.0  # on SIGTERM, how long running requests may take to finish
    kv_dir_interval: float = 60.0  # seconds between --kv-dir writes; 0: on drain only
    kv_events: str | None = None  # the ZMQ endpoint KV events are published on (lifecycle/kv_events.py); None: none
    kv_events_pod: str | None = None  # the pod name in their topic; None: the host's name
    slot_save_path: Path | None = None  # where POST /slots/{id}?action=save|restore files live; None: 404
    request_timeout: float | None = None  # per request, from arrival
    api_keys: tuple[str, ...] = ()  # bearer tokens any route but /health needs; empty: open
    log_format: str = "console"
    log_level: str = "info"
    engine: EngineConfig = field(default_factory=EngineConfig)
    convert_type: str = "f16"  # a Hugging Face folder's GGUF type (worker.source.convert.OUTPUT_TYPES)
    quantize: str | None = None  # then quantized by llama.cpp to this (worker.source.convert.QUANT_TYPES)
    # The projector: fetched beside the model at load, and then the engine's mmproj file; None: models.toml's, if any.
    mmproj: ProjectorSource | None = None
    lora: tuple[LoraRef, ...] = ()  # LoRA adapters to load on the model, in id order
    lora_init_without_apply: bool = False  # requests that name no adapter run on the base model
    media: MediaSettings = field(default_factory=MediaSettings)  # what requests' images may be


def settings_from_flags(flags: dict) -> Settings:
    """The CLI's flags (already range-checked by click) as one Settings."""
    engine_fields = {name: flags[name] for name in (
        "device", "n_gpu_layers", "rpc_servers", "ctx_size", "parallel", "max_queue", "cache_ram",
        "cache_type_k", "cache_type_v", "flash_attn", "reasoning_format", "embeddings", "pooling",
        "model_draft", "draft_max", "draft_min",
    )}
    backend = flags["backend"].lower()
    batch, ubatch = flags["batch_size"], flags["ubatch_size"]
    engine_fields["batch_size"] = default_batch_size(backend) if batch is None else batch
    engine_fields["ubatch_size"] = default_ubatch_size(backend) if ubatch is None else ubatch
    if flags["pooling"] and not flags["embeddings"]:
        raise WorkerError(f"--pooling {flags['pooling']} only applies to embeddings: add --embeddings")
    engine_fields["prefix_cache"] = CacheMode(flags["prefix_cache"])
    engine_fields["spec_type"] = SpecType(flags["spec_type"])
    if (flags["spec_type"] == "draft") != (flags["model_draft"] is not None):
        raise WorkerError("--spec-type draft and --model-draft PATH go together: a draft model drafts only under "
                          "--spec-type draft, and that needs one")
    if flags["threads"] is not None:
        engine_fields["threads"] = flags["threads"]
    engine_fields.update(kv_dir_fields(flags))
    engine = EngineConfig(backend=backend, **engine_fields)
    # flags that would break exact mode's promise stop here, before any model (or hub projector) is fetched
    config_attention(engine, batch_invariant=expects_batch_invariant(engine, projector=bool(flags["mmproj"])))
    return Settings(
        model=flags["model"],
        model_ref=flags["model_ref"],
        worker_id=flags["worker_id"] or str(uuid.uuid4()),
        quant=flags["quant"],
        models_file=flags["models_file"],
        host=flags["host"],
        port=flags["port"],
        callback_url=flags["callback_url"],
        callback_timeout=flags["callback_timeout"],
        heartbeat_url=flags["heartbeat_url"],
        heartbeat_interval=flags["heartbeat_interval"],
        drain_timeout=flags["drain_timeout"],
        kv_dir_interval=flags["kv_dir_interval"],
        kv_events=flags["kv_events"],
        kv_events_pod=flags["kv_events_pod"],
        slot_save_path=flags["slot_save_path"],
        request_timeout=flags["request_timeout"],
        api_keys=tuple(key for key in (flags["api_key"], os.environ.get(ORCH_TOKEN_ENV)) if key),
        log_format=flags["log_format"] or default_format(),
        log_level=flags["log_level"],
        engine=engine,
        convert_type=flags["convert_type"],
        quantize=flags["quantize"],
        mmproj=projector_source(flags["mmproj"]) if flags["mmproj"] else None,
        lora=flags["lora"],
        lora_init_without_apply=flags["lora_init_without_apply"],
        media=MediaSettings(flags["image_max_bytes"], flags["image_max_pixels"], flags["media_urls"],
                            flags["media_fetch_timeout"],
                            flags["media_path"].resolve() if flags["media_path"] else None,
                            flags["audio_max_seconds"]),
    )


def kv_dir_fields(flags: dict) -> dict:
    """--kv-dir's engine fields: the folder and its bound (by default --cache-ram's, since a worker loads no more at
    start than its host memory holds)."""
    kv_dir = flags["kv_dir"]
    if kv_dir is None:
        return {}
    if flags["prefix_cache"] == "off":
        raise WorkerError("--kv-dir keeps cells for the prefix cache, which --prefix-cache off turns off: drop one")
    if flags["rpc_servers"]:
        raise WorkerError("--kv-dir with --rpc: the rpc servers compute cells with their own llama.cpp builds, which "
                          "this worker cannot fingerprint, so a restart could load cells another build made; drop one")
    if flags["cache_ram"] == 0:
        raise WorkerError("--kv-dir loads its cells into host memory at start, and --cache-ram 0 leaves none: give "
                          "--cache-ram some MiB (8192 by default)")
    size = flags["kv_dir_size"]
    return {"kv_dir": kv_dir, "kv_dir_mib": flags["cache_ram"] if size is None else size}
