"""serve: bind the port first (so /health can say "loading"), load, announce, serve until a signal."""

from __future__ import annotations

import asyncio
import signal
from contextlib import suppress

import structlog
from aiohttp import web

from worker.api import Phase, WorkerState, build_app
from worker.engine import Engine
from worker.engine.backends import require_backend
from worker.lifecycle.callbacks import post_ready
from worker.settings import Settings
from worker.source import ResolvedModel, load_registry, resolve_model
from worker.source.convert import Conversion, ProgressReport

log = structlog.get_logger(__name__)


def _bound_port(runner: web.AppRunner) -> int:
    """The real port, also when --port 0 asked the OS to pick one."""
    return runner.addresses[0][1]


def _load(settings: Settings, loop: asyncio.AbstractEventLoop) -> tuple[ResolvedModel, Engine]:
    conversion = Conversion(settings.convert_type, settings.quantize)
    model = resolve_model(settings.model, load_registry(), conversion, ProgressReport())
    return model, Engine.load(model.path, settings.engine, loop)


def _ready_body(settings: Settings, worker: WorkerState, url: str, engine: Engine) -> dict:
    return {
        "worker_id": settings.worker_id, "url": url, "uri": url,
        "model_ref": settings.model_ref or worker.model_id,
        "backend": settings.engine.backend, "device": settings.engine.device,
        "vram_bytes": engine.size_bytes if settings.engine.backend != "cpu" else 0,
        "memory_bytes": engine.size_bytes,
    }


async def serve(settings: Settings) -> None:
    require_backend(settings.engine.backend, settings.engine.device)  # fail before binding anything
    loop = asyncio.get_running_loop()
    worker = WorkerState(settings, model_id=settings.model or "")
    runner = web.AppRunner(build_app(worker), handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.host, settings.port).start()
    url = f"http://{settings.host}:{_bound_port(runner)}"
    log.info("listening", url=url, worker_id=settings.worker_id)

    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        loading = loop.run_in_executor(None, _load, settings, loop)
        done, _ = await asyncio.wait([loading, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        if loading not in done:
            log.info("stopped_while_loading")
            return
        model, engine = loading.result()  # a WorkerError here ends serve with its one line
        worker.model_id, worker.engine, worker.phase = model.model_id, engine, Phase.READY
        log.info("ready", url=url, model=model.model_id, path=str(model.path))
        callback = None
        if settings.callback_url:
            callback = asyncio.ensure_future(post_ready(settings.callback_url, _ready_body(settings, worker, url, engine)))
        await stop.wait()
        log.info("shutting_down")
        worker.phase = Phase.DRAINING
        if callback is not None:
            callback.cancel()
            with suppress(asyncio.CancelledError):
                await callback
    finally:
        if worker.engine is not None:
            await loop.run_in_executor(None, worker.engine.shutdown)
        await runner.cleanup()
