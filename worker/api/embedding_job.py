"""One embeddings request's inputs through the pooled context, the same way for every dialect (OpenAI's
/v1/embeddings, Ollama's /api/embed): tokenized off the event loop, never truncated, bounded by the request
timeout; a failure is raised in the route's own error shape (error_shapes.FailedJob)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from worker.api.error_shapes import FailedJob, Failure, pooled_failure
from worker.api.problems import Problem
from worker.api.state import WorkerState
from worker.engine import EmbeddingFailed

if TYPE_CHECKING:
    from worker.engine import ServedModel, Vector

log = structlog.get_logger("worker.request")


DISABLED = Failure(404, "embeddings_disabled", [Problem(
    "worker", "--embeddings",
    "this worker serves no embeddings: start it with --embeddings (or LLM_WORKER_EMBEDDINGS=1)")])


def require_embeddings(served: ServedModel) -> None:
    if served.pooled.pooling is None:
        raise FailedJob(DISABLED)


async def embedded(worker: WorkerState, served: ServedModel, inputs: list[str | list[int]], fields: list[str],
                   constraint: str) -> tuple[list[Vector], int]:
    """Each input's pooled, L2-normalized vector, and the tokens they took. `fields`: where each input is in the
    body, to name it in a problem; `constraint`: what an input must be, as the route says it."""
    started = time.monotonic()
    # Off the event loop: a 4 MiB body keeps the tokenizer busy long enough to stall every stream.
    tokens = await asyncio.to_thread(served.pooled.tokenize_inputs, inputs)
    try:
        # Refused up front: an empty input, or one longer than a micro-batch
        vectors = await asyncio.wait_for(served.pooled.embed(tokens, fields, constraint),
                                         worker.settings.request_timeout)
    except (EmbeddingFailed, asyncio.TimeoutError) as exc:
        log.warning("embeddings_failed", inputs=len(tokens), message=str(exc) or "timeout")
        raise FailedJob(pooled_failure(exc, worker.settings.request_timeout)) from None
    n_tokens = sum(len(t) for t in tokens)
    log.info("embeddings_done", inputs=len(tokens), prompt_tokens=n_tokens,
             e2e_ms=round((time.monotonic() - started) * 1e3, 1))
    return vectors, n_tokens
