"""The pool-manager contract: /health, /v1/ready, /execute (/v1/inference), /cancel."""

from __future__ import annotations

from aiohttp import web

from worker.api import sse
from worker.api.error_shapes import RETRY_AFTER_S, queue_full
from worker.api.generation import generating, generation_input, prepare
from worker.api.orch.request import ExecuteRequest, parse_execute
from worker.api.problems import InvalidRequest, Problem, Reader, parse_json_object
from worker.api.state import WORKER, Phase, WorkerState
from worker.engine import Finished, FinishReason, QueueFull, TokenEvent
from worker.timefmt import utc_now

routes = web.RouteTableDef()

_STOP_REASONS = {
    FinishReason.EOS: "EOS",
    FinishReason.STOP: "STOP_SEQUENCE",
    FinishReason.LENGTH: "MAX_TOKENS",
    FinishReason.CANCELLED: "CANCELLED",
}


@routes.get("/health")
@routes.get("/v1/health")
async def health(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    if worker.phase is Phase.READY:
        served = worker.require_served()
        return web.json_response({"status": "healthy", "vram_bytes": worker.vram_bytes(), **worker.cache_ram(),
                                  "input_modalities": list(served.prompts.input_modalities),
                                  "exactness": served.facts.exactness.as_dict(),
                                  # what startup left to measure once idle (busy cores): drafts weigh estimates
                                  "untimed_pass_rows": list(served.stats().untimed_pass_rows)})
    return web.json_response({"status": worker.phase.value}, status=503)


@routes.get("/v1/ready")
async def ready(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    body = {"ready": worker.phase is Phase.READY, "state": worker.state, "model_loaded": worker.served is not None}
    if worker.served is not None:
        stats = worker.served.stats()
        body.update(running=stats.running, waiting=stats.waiting, slots=stats.slots,
                    kv_cells_used=stats.kv_cells_used)
    return web.json_response(body)


@routes.get("/v1/loading/progress")
async def loading_progress(request: web.Request) -> web.StreamResponse:
    """SSE of {"stage", "done", "total"} until the model is warm, then [DONE]."""
    worker = request.app[WORKER]
    stream = await sse.open_stream(request)
    if worker.progress is not None:
        async for progress in worker.progress.updates():
            await sse.send(stream, progress.as_dict())
    await stream.write(sse.DONE)
    return stream


_ERROR_CODES = {FinishReason.ERROR: "INFERENCE_FAILED", FinishReason.TIMEOUT: "TIMEOUT"}


def _end_events(finished: Finished, vram: int) -> list[dict]:
    if finished.reason in _ERROR_CODES:
        return [{"type": "error", "code": _ERROR_CODES[finished.reason], "message": finished.message}]
    tokens_per_sec = finished.decode_tokens_per_s or 0.0
    end = {
        "type": "end",
        "tokens_out": finished.completion_tokens,
        "prompt_tokens_cached": finished.cached_tokens,
        "decode_time_ms": round(finished.decode_s * 1e3),
        "draft_tokens": finished.draft_tokens,
        "draft_accepted_tokens": finished.draft_accepted,
        "stop_reason": _STOP_REASONS[finished.reason],
    }
    if finished.stop_sequence is not None:
        end["stop_sequence_matched"] = finished.stop_sequence
    return [{"type": "metrics", "tokens_per_sec": round(tokens_per_sec, 1), "vram_bytes": vram}, end]


async def _stream_job(request: web.Request, worker: WorkerState, job: ExecuteRequest) -> web.StreamResponse:
    prepared = await prepare(worker, generation_input(worker, job.generation, job.prompt, request["request_id"], None,
                                                      "prompt"))
    async with generating(worker, prepared) as (handle,):
        worker.jobs[job.job_id] = handle.cancel
        try:
            stream = await sse.open_stream(request)
            await sse.send(stream, {"type": "started", "job_id": job.job_id, "model": worker.model_id,
                                    "started_at": utc_now()})
            index = 0
            async for event in handle:
                if isinstance(event, TokenEvent):
                    await sse.send(stream, {"type": "token", "t": event.text, "i": index})
                    index += 1
            for end in _end_events(handle.ended, worker.vram_bytes()):
                await sse.send(stream, end)
            await stream.write(sse.DONE)
            return stream
        finally:
            del worker.jobs[job.job_id]


@routes.post("/execute")
@routes.post("/v1/inference")
async def execute(request: web.Request) -> web.StreamResponse:
    worker = request.app[WORKER]
    worker.require_served()
    job = parse_execute(parse_json_object(await request.read()), worker.sampling)
    if job.job_id in worker.jobs:
        raise InvalidRequest([Problem("job_id", "unique among running jobs", f"job {job.job_id!r} is already running",
                                      job.job_id)])
    try:
        return await _stream_job(request, worker, job)
    except QueueFull as exc:
        # Refused before the stream opened; the contract's clients read events, so say it as one.
        stream = await sse.open_stream(request, status=503, headers={"Retry-After": RETRY_AFTER_S})
        await sse.send(stream, {"type": "error", "code": "INFERENCE_FAILED", "message": queue_full(exc).message})
        await stream.write(sse.DONE)
        return stream


@routes.post("/cancel")
async def cancel(request: web.Request) -> web.Response:
    worker = request.app[WORKER]
    r = Reader(parse_json_object(await request.read()))
    job_id = r.string("job_id", required=True, min_length=1)
    r.done()
    cancel_job = worker.jobs.get(job_id)
    if cancel_job is not None:
        cancel_job()
    return web.json_response({"job_id": job_id, "status": "cancelling" if cancel_job else "unknown"}, status=202)
