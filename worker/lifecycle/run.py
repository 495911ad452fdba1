"""serve: bind first (so /health can say "loading"), load, announce, serve, drain on a signal."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from worker.api import Phase, WorkerState, build_app
from worker.api.adapters import Adapters
from worker.api.loading_progress import LoadingProgress
from worker.api.model_sampling import check_entry, model_defaults
from worker.engine import Lora, SamplingParams
from worker.engine.host import build_origin, choose_library, load_library
from worker.lazy import package_without_init
from worker.lifecycle.callbacks import final_heartbeat, heartbeat_body, heartbeat_loop, post_ready
from worker.lifecycle.kv_dir import persist, persist_every
from worker.lifecycle.kv_events import KvEvents
from worker.settings import LoraRef, Settings
from worker.source import ResolvedModel, load_registry
from worker.source.convert import Conversion, ProgressReport, Quantizer
from worker.source.projector import fetch_projector
from worker.source.registry import Registry
from worker.source.resolve import as_gguf, fetch_model
from worker.worker_error import WorkerError

if TYPE_CHECKING:
    from worker.engine import ServedModel

log = structlog.get_logger(__name__)

DRAIN_POLL_S = 0.05


def _fetch_loras(refs: tuple[LoraRef, ...], registry: Registry, model_id: str) -> tuple[Lora, ...]:
    """Each --lora adapter as a local GGUF, fetched as --model is; its name is what a request's `model` may say."""
    loras: list[Lora] = []
    for ref in refs:
        fetched = fetch_model(ref.ref, registry)
        if fetched.path.is_dir():
            raise WorkerError(f"--lora {ref.ref} is a folder; a LoRA adapter is served as a GGUF: convert a PEFT "
                              "adapter folder with llama.cpp's convert_lora_to_gguf.py --base <the model's folder>")
        taken = [lora.name for lora in loras] + [model_id]
        if fetched.model_id in taken:
            raise WorkerError(f"--lora {ref.ref} is named {fetched.model_id!r}, as the model or another adapter is; "
                              "a request's `model` names an adapter by it: rename the file or give it a models.toml "
                              "alias")
        loras.append(Lora(fetched.path, fetched.model_id, ref.scale))
    return tuple(loras)


def _load(settings: Settings, progress: LoadingProgress,
          loop: asyncio.AbstractEventLoop) -> tuple[ResolvedModel, SamplingParams, ServedModel]:
    progress.report("download", 0, 1)
    registry = load_registry(*([settings.models_file] if settings.models_file else []))
    log_progress = ProgressReport()

    def report(stage: str, done: int, total: int) -> None:  # the log/terminal bar and the SSE stream
        log_progress(stage, done, total)
        progress.report(stage, done, total)

    fetched = fetch_model(settings.model, registry, quant=settings.quant)
    projector = settings.mmproj or fetched.defaults.mmproj  # the flag wins over the models.toml entry's
    mmproj = fetch_projector(projector, fetched.path) if projector else None
    progress.report("download", 1, 1)
    quantizer: Quantizer | None = None
    if settings.quantize and fetched.path.is_dir():
        # llama.cpp's quantizer loads llama_cpp here, before its build is chosen for the model: the model then runs
        # on the build loaded (load_library says which and why).
        from worker.engine.host import quantize_model

        quantizer = quantize_model
    model = as_gguf(fetched, Conversion(settings.convert_type, settings.quantize, quantizer), report)
    check_entry(model.defaults.sampling)  # before the model loads: a bad table fails at once
    config = settings.engine
    if config.ctx_size is None and model.defaults.ctx_size is not None:
        config = replace(config, ctx_size=model.defaults.ctx_size)
    config = replace(config, mmproj=mmproj, lora=_fetch_loras(settings.lora, registry, model.model_id))
    library = load_library(choose_library(model.path, config))
    # Exact mode without the batch-invariant build says so, once: it runs slower kernels, and some rows lose exactness.
    (log.warning if library.fallback else log.info)("library_chosen", build=library.build, path=library.path,
                                                    reason=library.reason, built_by=build_origin(library.path))
    # The first import of llama_cpp, which loads the library just chosen: its C API only, not its __init__'s Llama
    # class, which would load jinja2 and diskcache beside it (worker/lazy.py).
    package_without_init("llama_cpp", "llama_cpp")
    from worker.engine.host import load_model

    served = load_model(model.path, config, loop, progress.report, chat_template=model.defaults.chat_template,
                        template_kwargs=model.defaults.chat_template_kwargs)
    try:
        # What a request leaves out: the models.toml entry's, else the GGUF's, else llama-server's, field by field.
        sampling = model_defaults(model.defaults.sampling, served.facts.metadata)
    except WorkerError:
        served.shutdown()
        raise
    log.info("sampling_defaults", **sampling.described())
    return model, sampling.params, served


class WorkerLife:
    """One serve run: the HTTP site, the worker state, the signals, the background tasks."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.worker = WorkerState(settings, model_id=settings.model or "")
        self.progress = self.worker.progress = LoadingProgress(self.loop)
        self.runner = web.AppRunner(
            build_app(self.worker), handler_cancellation=True, access_log=None,
        )
        self.stop = asyncio.Event()
        self.kv_events: KvEvents | None = None  # --kv-events' publisher, bound before the model loads
        self.url = ""
        self.port = 0

    def _on_signal(self) -> None:
        if self.stop.is_set():
            log.warning("second_signal_exiting_now")
            os._exit(1)
        self.stop.set()

    async def run(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, self.settings.host, self.settings.port).start()
        self.port = self.runner.addresses[0][1]  # the real port, also for --port 0
        self.url = f"http://{self.settings.host}:{self.port}"
        log.info("listening", url=self.url, worker_id=self.settings.worker_id)
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.loop.add_signal_handler(sig, self._on_signal)
        tasks: list[asyncio.Task] = []
        try:
            if self.settings.kv_events:
                self.kv_events = KvEvents(self.settings.kv_events, self.settings.kv_events_pod)
            served = await self._load()
            if served is None:
                return
            if self.kv_events is not None:
                self.kv_events.start(served, self.worker.model_id)
            tasks = self._announce(served)
            await self.stop.wait()
            await self._drain(served)
            await persist(served)  # what the replacement starts with (--kv-dir)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.worker.served is not None:
                await self.loop.run_in_executor(None, self.worker.served.shutdown)
            if self.kv_events is not None:  # after the engine: its cells are gone
                await self.loop.run_in_executor(None, self.kv_events.close)
            await self._final_heartbeat()
            await self.runner.cleanup()

    async def _load(self) -> ServedModel | None:
        """Load and warm up while serving /health 503: the served model, or None if a signal came first."""
        loading = self.loop.run_in_executor(None, _load, self.settings, self.progress, self.loop)
        stopping = asyncio.ensure_future(self.stop.wait())
        waiting: list[asyncio.Future[Any]] = [loading, stopping]
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if loading not in done:
            log.info("stopped_while_loading")
            return None
        try:
            model, sampling, served = loading.result()
        except Exception:
            self.worker.phase = Phase.ERROR
            raise  # a WorkerError ends serve with its one line
        finally:
            self.progress.finish()
        self.worker.model_id, self.worker.sampling, self.worker.served = model.model_id, sampling, served
        self.worker.adapters = Adapters.loaded(served.facts.loras, self.settings.lora_init_without_apply)
        self.worker.phase = Phase.READY
        log.info("ready", url=self.url, model=model.model_id, path=str(model.path))
        return served

    def _announce(self, served: ServedModel) -> list[asyncio.Task]:
        settings = self.settings
        tasks: list[asyncio.Task] = []
        if settings.callback_url:
            ready = post_ready(settings.callback_url, self._ready_body(served), settings.callback_timeout)
            tasks.append(asyncio.ensure_future(ready))
        if settings.heartbeat_url:
            tasks.append(asyncio.ensure_future(
                heartbeat_loop(settings.heartbeat_url, settings.heartbeat_interval, self._heartbeat_body)))
        if settings.engine.kv_dir is not None and settings.kv_dir_interval > 0:
            tasks.append(asyncio.ensure_future(persist_every(served, settings.kv_dir_interval)))
        return tasks

    def _ready_body(self, served: ServedModel) -> dict:
        settings = self.settings
        return {
            "worker_id": settings.worker_id, "url": self.url, "uri": self.url,
            "model_ref": settings.model_ref or self.worker.model_id,
            "backend": settings.engine.backend, "device": settings.engine.device,
            "vram_bytes": self.worker.vram_bytes(),
            "memory_bytes": served.facts.size_bytes,
            **self.worker.cache_ram(),
        }

    def _heartbeat_body(self) -> dict:
        state = self.worker.state
        status = state if state in ("idle", "busy", "draining") else "busy"
        return heartbeat_body(self.settings.worker_id, self.worker.model_id, self.settings.engine.device, self.port,
                              status)

    async def _drain(self, served: ServedModel) -> None:
        """Refuse new work (503), let admitted requests finish up to --drain-timeout, then cancel the rest."""
        self.worker.phase = Phase.DRAINING
        deadline = self.loop.time() + self.settings.drain_timeout
        stats = served.stats()
        log.info("draining", running=stats.running, waiting=stats.waiting, timeout_s=self.settings.drain_timeout)
        while (stats.running or stats.waiting) and self.loop.time() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
            stats = served.stats()
        if stats.running or stats.waiting:
            log.warning("drain_timeout_cancelling", running=stats.running, waiting=stats.waiting)

    async def _final_heartbeat(self) -> None:
        if self.settings.heartbeat_url and self.worker.served is not None:
            await final_heartbeat(self.settings.heartbeat_url, self._heartbeat_body())


async def serve(settings: Settings) -> None:
    config = settings.engine
    if not config.on_cpu_alone:
        # Fail before binding anything. These load llama.cpp's default library (or LLAMA_CPP_LIB_PATH's), the only
        # one such a model gets; a cpu-only model's is chosen once the model is known
        # (engine/exactness/build_choice.py), and every build has the cpu backend.
        from worker.engine.host import check_rpc, require_backend

        require_backend(config.backend, config.device)
        check_rpc(config.rpc_servers)
    await WorkerLife(settings).run()
