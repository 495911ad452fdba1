"""The `llm-worker` command line."""

from __future__ import annotations

import asyncio
import faulthandler
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from worker import __version__
from worker.cli_sections import OrderedGroup, SectionedCommand, SectionOption
from worker.engine.host import DRAFT_MAX, bound_barrier_spins
from worker.fields import MAX_DRAFT
from worker.logs import configure as configure_logs
from worker.settings import (
    AUDIO_MAX_SECONDS,
    IMAGE_MAX_BYTES,
    IMAGE_MAX_PIXELS,
    MEDIA_FETCH_TIMEOUT,
    MEDIA_MAX_REDIRECTS,
    LoraRef,
)

# Names only: worker.source loads its modules on first use, so --help imports neither numpy nor gguf.
from worker.source.convert.types import OUTPUT_TYPES, QUANT_TYPES
from worker.worker_error import WorkerError

if TYPE_CHECKING:
    from click.decorators import FC  # what an option decorates: a command's function, or the command

    from worker.source.registry import Registry

# serve --help's sections, in the order a user needs them: what to serve, on what, how much at once, how to
# answer, where to listen, who manages the worker, what it says. docs/configuration.md groups its tables alike.
MODEL, BACKEND, CACHE, GENERATION, SERVER, POOL_MANAGER, LOGGING = SERVE_SECTIONS = (
    "Model", "Backend", "Slots, KV cache and prefix cache", "Generation", "Server", "Pool manager", "Logging")


def _option(*names: str, env: str, section: str | None = None, **kwargs: Any) -> Callable[[FC], FC]:
    """Every flag also reads LLM_WORKER_<NAME>, shown in --help, under `section` where the command has sections."""
    return click.option(*names, cls=SectionOption, section=section, envvar=f"LLM_WORKER_{env}", show_envvar=True,
                        **kwargs)


# Options shared by the commands that name models.
_models_file = _option("--models-file", env="MODELS_FILE", section=MODEL,
                       type=click.Path(dir_okay=False, path_type=Path), default=None,
                       help="Your own models.toml; it extends (and overrides by name) the shipped one.")
_quant = _option("--quant", env="QUANT", section=MODEL, default=None,
                 help="For hf:owner/repo: the GGUF whose name has this quant (Q4_K_M, Q8_0, ...).")
_log_format = _option("--log-format", env="LOG_FORMAT", section=LOGGING, type=click.Choice(["console", "json"]),
                      default=None,
                      help="Log lines for people or for machines.  [default: console on a terminal, else json]")
_log_level = _option("--log-level", env="LOG_LEVEL", section=LOGGING,
                     type=click.Choice(["debug", "info", "warning", "error"]),
                     default="info", show_default=True, help="Least severe log level shown.")


def _endpoints(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[str, ...]:
    """host:port[,host:port...]; whether each answers is checked at startup."""
    if not value:
        return ()
    endpoints = tuple(part.strip() for part in value.split(","))
    for endpoint in endpoints:
        host, colon, port = endpoint.rpartition(":")
        if not (colon and host and port.isdigit() and 0 < int(port) < 65536):
            raise click.BadParameter(f"{endpoint!r} is not host:port")
    return endpoints


def _lora_refs(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[LoraRef, ...]:
    """PATH[:SCALE] each: what follows the last colon is the scale when it is a number (hf:owner/repo has none)."""
    refs = []
    for value in values:
        ref, colon, tail = value.rpartition(":")
        try:
            scale = float(tail) if colon and ref else None
        except ValueError:
            scale = None
        if scale is None:
            refs.append(LoraRef(value))
        elif not math.isfinite(scale):
            raise click.BadParameter(f"{value!r}: the scale after the last colon must be a finite number")
        else:
            refs.append(LoraRef(ref, scale))
    return tuple(refs)


def _registry(models_file: Path | None) -> Registry:
    from worker.source import load_registry

    return load_registry(*([models_file] if models_file else []))


def _convert_type_option(*names: str) -> Callable[[FC], FC]:
    return _option(*names, env="CONVERT_TYPE", section=MODEL, type=click.Choice(list(OUTPUT_TYPES)), default="f16",
                   show_default=True, help="GGUF type a Hugging Face folder converts to (1-D tensors stay f32).")


def _quantize_option(*names: str) -> Callable[[FC], FC]:
    return _option(*names, env="QUANTIZE", section=MODEL, type=click.Choice(list(QUANT_TYPES)), default=None,
                   help="Then quantize the converted file with llama.cpp's quantizer.  [default: no]")


@click.group(cls=OrderedGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "-V", "--version", prog_name="llm-worker")
def cli() -> None:
    """Serve one GGUF model through llama.cpp: OpenAI- and Anthropic-compatible routes and
    the llama-orch pool-manager contract.

    Start with `llm-worker serve` (the default model on 127.0.0.1:8080); `llm-worker
    COMMAND --help` explains each command. README.md and docs/ in the source repository
    have the rest.
    """
    bound_barrier_spins()  # before any command loads llama.cpp: a busy host's cores must not stall its threads


@cli.command(cls=SectionedCommand, sections=SERVE_SECTIONS,
             short_help="Serve a model over HTTP until SIGINT/SIGTERM.")
@_option("--model", "-m", env="MODEL", section=MODEL, default=None,
         help="A .gguf file, a Hugging Face folder (config.json + *.safetensors, converted and cached), "
              "a models.toml alias, or hf:owner/repo[/file.gguf][@revision].  [default: the registry's default model]")
@_quant
@_models_file
@_option("--mmproj", env="MMPROJ", section=MODEL, default=None, metavar="PATH|hf:REPO",
         help="A multimodal projector made for the model: chat messages may then hold images. A .gguf path, or "
              "hf:owner/repo[/file.gguf][@revision], downloaded with the model: a repo's only mmproj*.gguf, or the "
              "one of the model file's type (F16, BF16, Q8_0, ...).  [default: a models.toml entry's mmproj]")
@_convert_type_option("--convert-type")
@_quantize_option("--quantize")
@_option("--lora", "lora", env="LORA", section=MODEL, multiple=True, callback=_lora_refs, metavar="PATH[:SCALE]",
         help="A LoRA adapter GGUF to load on the model (repeatable; ids 0, 1, ... in this order): a .gguf path, "
              "a models.toml alias or hf:owner/repo[/file.gguf]; requests that name no adapter run under it at "
              "SCALE (default 1); a request's lora list or model may choose others.")
@_option("--lora-init-without-apply", env="LORA_INIT_WITHOUT_APPLY", section=MODEL, is_flag=True, default=False,
         help="Load the --lora adapters at scale 0: requests run on the base model unless they name an adapter "
              "(or POST /lora-adapters sets scales).")
@_option("--model-ref", env="MODEL_REF", section=POOL_MANAGER, default=None,
         help="The pool manager's name for the model, echoed in callbacks.  [default: the served model id]")
@_option("--backend", env="BACKEND", section=BACKEND, default="cpu", show_default=True,
         help="llama.cpp backend: cpu, cuda, metal, vulkan... (must be in the installed build).")
@_option("--device", env="DEVICE", section=BACKEND, type=click.IntRange(min=0), default=0, show_default=True,
         help="GPU ordinal within the backend.")
@_option("--n-gpu-layers", "-ngl", env="N_GPU_LAYERS", section=BACKEND, type=click.IntRange(min=-1), default=None,
         help="Layers to offload (-1: all).  [default: all on a GPU backend or with --rpc, else 0]")
@_option("--rpc", "rpc_servers", env="RPC", section=BACKEND, default=None, callback=_endpoints,
         metavar="HOST:PORT[,HOST:PORT]",
         help="ggml-rpc-server processes that take layers too (llama.cpp's distributed backend; "
              "needs a build with the rpc preset).")
@_option("--host", env="HOST", section=SERVER, default="127.0.0.1", show_default=True, help="Listen address.")
@_option("--port", "-p", env="PORT", section=SERVER, type=click.IntRange(0, 65535), default=8080, show_default=True,
         help="Listen port (0: pick a free one, reported in the log and the callback).")
@_option("--ctx-size", "-c", env="CTX_SIZE", section=CACHE, type=click.IntRange(min=0), default=None,
         help="KV-cache tokens for all slots together (0: the model's training context). "
              "Each request gets ctx-size / parallel.  [default: the models.toml entry's ctx_size, else 0]")
@_option("--parallel", "-np", env="PARALLEL", section=CACHE, type=click.IntRange(min=1, max=256), default=4,
         show_default=True, help="Sequence slots decoded together (continuous batching).")
@_option("--batch-size", "-b", env="BATCH_SIZE", section=CACHE, type=click.IntRange(min=64), default=None,
         help="Most prompt tokens prefilled in one engine step (cut at multiples of 16 positions on the cpu "
              "backend, of --ubatch-size on a GPU).  [default: 512 on the cpu backend, else 2048]")
@_option("--ubatch-size", "-ub", env="UBATCH_SIZE", section=CACHE, type=click.IntRange(min=64), default=None,
         help="Physical micro-batch size; on the cpu backend a prefill chunk never exceeds it.  [default: 256 on "
              "the cpu backend (its compute buffer, in RAM, grows with it), else 512]")
@_option("--prefix-cache", env="PREFIX_CACHE", section=CACHE, type=click.Choice(["exact", "fast", "off"]),
         default="exact", show_default=True,
         help="Reuse KV cells a new prompt shares with a finished request's. exact: only cells that are bitwise "
              "what a fresh prefill makes, so greedy text never changes; fast: every matching cell, as "
              "llama-server does (text may change); off: prefill every prompt whole.")
@_option("--cache-ram", env="CACHE_RAM", section=CACHE, type=click.IntRange(min=0), default=8192, show_default=True,
         metavar="MIB",
         help="Host memory (MiB) for slots' cells that a new prompt pushes out, loaded back into a slot when a "
              "later prompt continues them (more conversations than slots), as llama-server's --cache-ram does; "
              "exact mode keeps only the cells it may reuse. 0: none.")
@_option("--kv-dir", env="KV_DIR", section=CACHE, type=click.Path(file_okay=False, path_type=Path), default=None,
         metavar="DIR",
         help="Keep the reusable KV cells of slots and host memory in DIR, written every --kv-dir-interval seconds "
              "and on drain; a worker started later with the same model and DIR loads them into host memory "
              "before it reports ready, so returning conversations start warm. Files another model, llama.cpp "
              "build or cache setting wrote are skipped with a warning.")
@_option("--kv-dir-size", env="KV_DIR_SIZE", section=CACHE, type=click.IntRange(min=1), default=None,
         metavar="MIB", help="Bound on --kv-dir's files (MiB), the oldest removed first.  [default: --cache-ram's "
                             "value: a worker loads no more than its host memory holds]")
@_option("--kv-dir-interval", env="KV_DIR_INTERVAL", section=CACHE, type=click.FloatRange(min=0), default=60.0,
         show_default=True, metavar="SECONDS",
         help="Seconds between --kv-dir writes (each writes only what no file holds yet); 0: on drain only.")
@_option("--kv-events", env="KV_EVENTS", section=CACHE, default=None, metavar="ENDPOINT",
         help="Publish which prompt blocks the slots, host memory and --kv-dir hold, and each change, as vLLM's KV "
              "events on a ZMQ PUB socket bound to ENDPOINT (tcp://*:5557): what llm-d's precise prefix-cache "
              "routing reads. Needs pip install 'llm-worker[kv-events]'.")
@_option("--kv-events-pod", env="KV_EVENTS_POD", section=CACHE, default=None, metavar="NAME",
         help="The pod named in the events' topic, kv@NAME@MODEL: what the router knows this worker by.  "
              "[default: the host's name]")
@_option("--slot-save-path", env="SLOT_SAVE_PATH", section=CACHE,
         type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
         help="Folder for POST /slots/{id}?action=save|restore files, as llama-server's flag; without it "
              "those routes answer 404 (llama-server: 501).")
@_option("--cache-type-k", env="CACHE_TYPE_K", section=CACHE, type=click.Choice(["f16", "bf16", "q8_0", "q4_0"]),
         default=None,
         help="KV cache type for K.  [default: f16; q8_0 in exact and off modes on the cpu backend without the "
              "batch-invariant build (the fallback: there a K type other than f16 holds flash attention to one kernel "
              "for every row, so text never follows the load)]")
@_option("--cache-type-v", env="CACHE_TYPE_V", section=CACHE, type=click.Choice(["f16", "bf16", "q8_0", "q4_0"]),
         default=None,
         help="KV cache type for V (anything but f16 needs flash attention).  [default: f16; bf16 in exact and off "
              "modes on the fallback when --cache-type-k is f16, so that flash attention keeps one kernel]")
@_option("--flash-attn", "-fa", env="FLASH_ATTN", section=CACHE, type=click.Choice(["auto", "on", "off"]),
         default="auto", show_default=True,
         help="llama.cpp's flash attention.  auto: in exact and off modes on for the cpu backend, every row held to "
              "one kernel (see --cache-type-k), and off elsewhere; in fast mode llama.cpp decides.")
@_option("--reasoning-format", env="REASONING_FORMAT", section=GENERATION,
         type=click.Choice(["deepseek", "auto", "deepseek-legacy", "none"]), default="deepseek", show_default=True,
         help="A thinking model's reasoning (the tags its chat template thinks in, as llama.cpp finds them), as "
              "llama-server's flag.  deepseek or auto: returned apart, as reasoning_content; deepseek-legacy: the "
              "same, but left in the content of a streamed answer; none: left in the answer as written.  A request's "
              "reasoning_format field overrides it.")
@_option("--spec-type", env="SPEC_TYPE", section=GENERATION, type=click.Choice(["auto", "none", "ngram", "draft"]),
         default="auto", show_default=True,
         help="Speculative decoding: each step verifies drafted tokens behind a sequence's row, and keeps them "
              "while they are what it samples.  ngram: drafts from the prompt and the answer so far (prompt "
              "lookup); draft: from --model-draft; auto: ngram where drafts cannot change the text (exact and off "
              "modes on the cpu backend, confirmed by the load-time check), none elsewhere. Text is unchanged "
              "where the load-time check allows; elsewhere the worker says so at startup.")
@_option("--model-draft", "-md", env="MODEL_DRAFT", section=GENERATION, type=click.Path(path_type=Path),
         default=None, help="The draft model for --spec-type draft: a .gguf with the model's vocabulary.")
@_option("--draft-max", env="DRAFT_MAX", section=GENERATION, type=click.IntRange(min=0, max=MAX_DRAFT),
         default=DRAFT_MAX, show_default=True,
         help="Drafted tokens a sequence puts in one step, at most (a request's draft_max may lower it; 0: off). "
              "Each step drafts only what its measured cost says pays.")
@_option("--draft-min", env="DRAFT_MIN", section=GENERATION, type=click.IntRange(min=0, max=MAX_DRAFT), default=0,
         show_default=True, help="A draft shorter than this is not verified.")
@_option("--embeddings", env="EMBEDDINGS", section=GENERATION, is_flag=True, default=False,
         help="Serve /v1/embeddings from a second llama.cpp context on the same weights; an input may hold "
              "up to --ubatch-size tokens.")
@_option("--pooling", env="POOLING", section=GENERATION, type=click.Choice(["mean", "cls", "last"]), default=None,
         help="How --embeddings pools a token sequence into one vector.  [default: the GGUF's, else mean]")
@_option("--threads", "-t", env="THREADS", section=BACKEND, type=click.IntRange(min=1), default=None,
         help="CPU threads for llama.cpp.  [default: the cores this process may use]")
@_option("--max-queue", env="MAX_QUEUE", section=SERVER, type=click.IntRange(min=0), default=64, show_default=True,
         help="Waiting requests beyond the slots; past it requests get 503 + Retry-After.")
@_option("--worker-id", env="WORKER_ID", section=POOL_MANAGER, default=None,
         help="Opaque id echoed in callbacks.  [default: a fresh uuid4]")
@_option("--callback-url", env="CALLBACK_URL", section=POOL_MANAGER, default=None,
         help="POST the ready callback here once the model is loaded and warm.")
@_option("--callback-timeout", env="CALLBACK_TIMEOUT", section=POOL_MANAGER, type=click.FloatRange(min=0),
         default=60.0, show_default=True,
         help="Seconds to keep retrying the ready callback (connection errors, 5xx) before giving up.")
@_option("--heartbeat-url", env="HEARTBEAT_URL", section=POOL_MANAGER, default=None,
         help="POST a heartbeat here every --heartbeat-interval.")
@_option("--heartbeat-interval", env="HEARTBEAT_INTERVAL", section=POOL_MANAGER, type=click.FloatRange(min=0.1),
         default=10.0, show_default=True, help="Seconds between heartbeats.")
@_option("--drain-timeout", env="DRAIN_TIMEOUT", section=POOL_MANAGER, type=click.FloatRange(min=0), default=30.0,
         show_default=True,
         help="On SIGTERM/SIGINT, seconds running requests get to finish before they are cancelled.")
@_option("--request-timeout", env="REQUEST_TIMEOUT", section=SERVER, type=click.FloatRange(min=0, min_open=True),
         default=None,
         help="Seconds a request may take from arrival; past it, it ends with a TIMEOUT error.  [default: none]")
@_option("--media-urls", env="MEDIA_URLS", section=SERVER, is_flag=True, default=False,
         help="Fetch http(s) image URLs that requests send (off: only inline data: images). The worker then reaches "
              "whatever those URLs name, from its own network: turn it on only where that is safe. Each fetch is "
              f"held to --media-fetch-timeout, {MEDIA_MAX_REDIRECTS} redirects and --image-max-bytes (reading stops "
              "there).")
@_option("--media-fetch-timeout", env="MEDIA_FETCH_TIMEOUT", section=SERVER,
         type=click.FloatRange(min=0, min_open=True), default=MEDIA_FETCH_TIMEOUT, show_default=True,
         metavar="SECONDS", help="Seconds one --media-urls fetch may take, redirects and body included.")
@_option("--media-path", env="MEDIA_PATH", section=SERVER,
         type=click.Path(exists=True, file_okay=False, path_type=Path), default=None, metavar="DIR",
         help="Read file:// image URLs, only for files under DIR once symlinks and .. are resolved: "
              "file://cat.png is DIR/cat.png (as llama-server's --media-path), file:///abs/path must lie in DIR.  "
              "[default: file:// URLs refused]")
@_option("--image-max-bytes", env="IMAGE_MAX_BYTES", section=SERVER, type=click.IntRange(min=1),
         default=IMAGE_MAX_BYTES, show_default=True, metavar="BYTES",
         help="Largest image or audio file a request may send or name (inline, URL or file).")
@_option("--image-max-pixels", env="IMAGE_MAX_PIXELS", section=SERVER, type=click.IntRange(min=1),
         default=IMAGE_MAX_PIXELS, show_default=True, metavar="PIXELS",
         help="Largest image (width x height, read from its header before decoding): a small file can claim "
              "gigapixels, and decoding allocates what it claims.")
@_option("--audio-max-seconds", env="AUDIO_MAX_SECONDS", section=SERVER, type=click.FloatRange(min=0, min_open=True),
         default=AUDIO_MAX_SECONDS, show_default=True, metavar="SECONDS",
         help="Longest audio clip a request may send, once decoded (an audio projector's --mmproj).")
@_option("--api-key", env="API_KEY", section=SERVER, default=None,
         help="Bearer token every route but /health requires (LLORCH_API_TOKEN is accepted too).")
@_log_format
@_log_level
def serve(**flags: Any) -> None:
    """Serve a model over HTTP until SIGINT/SIGTERM.

    \b
    Examples:
      llm-worker serve                                   # the default model on 127.0.0.1:8080
      llm-worker serve --model q4.gguf --port 9000
      llm-worker serve --model q4.gguf --backend cuda --device 1
      llm-worker serve --model hf:owner/repo --quant Q4_K_M
      llm-worker serve --model big.gguf --rpc 10.0.0.2:50052,10.0.0.3:50052

    Every option also reads the LLM_WORKER_* variable shown beside it; docs/configuration.md
    says more of each. Sampling defaults are per model, in models.toml.
    """
    from worker.lifecycle.run import serve as run_serve  # llama_cpp, numpy, gguf: only once serving
    from worker.settings import settings_from_flags

    settings = settings_from_flags(flags)
    configure_logs(settings.log_format, settings.log_level)
    # llama.cpp and the GPU's driver run in this process, and a crash there (lavapipe's NULL read, under a GPU check)
    # ended it without a line: the signal and every thread's Python stack go to stderr first.
    faulthandler.enable()
    asyncio.run(run_serve(settings))
    # A clean stop has joined the engine, saved --kv-dir and written its last line by now: what the interpreter's
    # teardown would still do (collect every module's objects) took 0.1-0.2 s of each stop, which a replacement or
    # a pool manager waits out. Exit without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@cli.command(short_help="Download a model without serving it; print its path.")
@click.argument("name", required=False)
@_quant
@_models_file
@_log_format
@_log_level
def pull(name: str | None, quant: str | None, models_file: Path | None, log_format: str | None, log_level: str) -> None:
    """Download a model without serving it; print where it is.

    NAME is a models.toml alias or hf:owner/repo[/file.gguf][@revision] (default: the
    registry's default model). A repo with several GGUFs needs --quant or a file name;
    the error lists them. An entry's projector (mmproj) is downloaded too, so that
    `serve` needs nothing more.

    \b
    Examples:
      llm-worker pull hf:owner/repo --quant Q4_K_M
      llm-worker pull hf:owner/repo/model-Q8_0.gguf@main
    """
    from worker.source.resolve import fetch_model

    configure_logs(log_format, log_level)
    fetched = fetch_model(name, _registry(models_file), quant=quant)
    if fetched.defaults.mmproj is not None:
        from worker.source.projector import fetch_projector

        fetch_projector(fetched.defaults.mmproj, fetched.path)
    click.echo(fetched.path)


@cli.command(short_help="List the models.toml entries and what is downloaded.")
@_models_file
def models(models_file: Path | None) -> None:
    """List the models.toml entries and what is already downloaded, with sizes."""
    from worker.source.listing import render

    click.echo(render(_registry(models_file)))


@cli.command(short_help="Show what the installed llama.cpp build supports.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
def backends(as_json: bool) -> None:
    """What the installed llama.cpp build supports: GPU offload, BLAS, RPC, backends and devices."""
    from worker import backends_report
    from worker.engine.host import build_info

    info = build_info()
    click.echo(backends_report.as_json(info) if as_json else backends_report.render(info))


@cli.command("build-backend", short_help="Recompile llama.cpp for a backend or build preset.")
@click.argument("presets", nargs=-1, required=True)
@click.option("--dry-run", is_flag=True, help="Print the build command instead of running it.")
@_log_format
@_log_level
def build_backend(presets: tuple[str, ...], dry_run: bool, log_format: str | None, log_level: str) -> None:
    """Recompile llama.cpp for PRESETS from CMakePresets.json, into this Python.

    Presets: cpu, cpu-native, openblas, cuda, metal, vulkan, and rpc, which adds to
    the ones before it; your CMAKE_ARGS are appended (they win). From a checkout it
    runs make install's scripts/install-llama-cpp-libs: llama.cpp with our patches,
    compiled once per flags (cached in ~/.cache/llm-worker/llama.cpp), its libraries
    put in llama-cpp-python's llama_cpp/lib; exact mode's batch-invariant build stays
    as make install left it. Installed from a wheel, it reinstalls llama-cpp-python
    from source instead, bypassing pip's wheel cache. Minutes on a CPU.

    \b
    Examples:
      llm-worker build-backend cuda
      llm-worker build-backend cpu rpc
      CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=89 llm-worker build-backend cuda
    """
    from worker import build_backend as builder
    from worker.build_presets import variant

    chosen, extra = variant(presets), os.environ.get("CMAKE_ARGS", "")
    if dry_run:
        click.echo(builder.build_command(chosen, extra_cmake_args=extra).shell())
        return
    configure_logs(log_format, log_level)
    builder.build(chosen, extra_cmake_args=extra)


@cli.command(short_help="Convert a SafeTensors folder to GGUF (cached).")
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also copy the GGUF here.  [default: only the cache; its path is printed]")
@_convert_type_option("--type", "convert_type")
@_quantize_option("--quantize")
@_log_format
@_log_level
def convert(src: Path, output: Path | None, convert_type: str, quantize: str | None,
            log_format: str | None, log_level: str) -> None:
    """Convert a Hugging Face SafeTensors folder to GGUF (into the cache; `serve` reuses it).

    \b
    Examples:
      llm-worker convert ./SmolLM2-135M-Instruct
      llm-worker convert ./Qwen2.5-0.5B-Instruct --quantize q4_k_m -o qwen-q4_k_m.gguf
    """
    import shutil

    from worker.source.convert import Conversion, ProgressReport, Quantizer, converted_model, is_hf_folder
    from worker.user_cache import atomic_path

    configure_logs(log_format, log_level)
    if not is_hf_folder(src):
        raise WorkerError(f"{src} has no config.json; pass a Hugging Face model folder")
    quantizer: Quantizer | None = None
    if quantize is not None:  # llama.cpp's quantizer: the one use of llama.cpp a conversion makes
        from worker.engine.host import quantize_model

        quantizer = quantize_model
    path = converted_model(src, Conversion(convert_type, quantize, quantizer), ProgressReport())
    if output is not None:
        with atomic_path(output) as tmp:
            shutil.copyfile(path, tmp)
        path = output
    click.echo(str(path))


def main() -> None:
    try:
        cli(prog_name="llm-worker")
    except WorkerError as exc:
        raise SystemExit(f"llm-worker: error: {exc}") from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
