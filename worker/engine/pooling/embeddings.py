"""Embeddings (and a reranker's rank scores): a pooled llama context on the same weights, fed on the engine thread
between generation steps, each input's vector the same batched or alone (docs/api.md, "Embeddings")."""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import llama_cpp
import structlog

from worker.engine.errors import EmbeddingFailed, UnfitInputs
from worker.engine.native.model import Pooled

log = structlog.get_logger(__name__)

EMBEDDINGS, RANK = "embeddings", "rank"  # the pooled contexts a model may have: --embeddings', a reranker's head
Vector = array  # of 'f' (float32): L2-normalized embeddings, or a rank head's raw outputs
# Where each input starts in a batch: attention and mean-pooling sum over batch rows in SIMD lanes, so an input's
# vector follows where its rows start. In exact and off modes inputs start at multiples of the widest float vector
# (AVX-512: 16 lanes), with filler rows between, and match each alone (docs/api.md, "Embeddings"); the filler costs up
# to 15 rows an input. Fast mode, which promises no batch invariance, packs them tight.
ROW_ALIGN = 16
FILLER_TOKEN = 0  # any token of the vocab: the filler sequence's output is never read


def _align_up(n: int, align: int) -> int:
    return -(-n // align) * align


Outcome = list[Vector] | EmbeddingFailed


@dataclass(eq=False)
class EmbeddingJob:
    """One request's inputs; `finish` hears its vectors (in input order) or its failure, once, on the engine thread."""

    inputs: list[list[int]]
    finish: Callable[[Outcome], None]
    cancelled: bool = False  # the caller stopped waiting: inputs not yet decoded are skipped
    planned: int = 0  # inputs handed to a decode so far
    vectors: dict[int, Vector] = field(init=False)  # by input index, as they are decoded
    remaining: int = field(init=False)

    def __post_init__(self) -> None:
        self.vectors = {}
        self.remaining = len(self.inputs)


Row = tuple[EmbeddingJob, int]  # a job and the index of one of its inputs: one sequence of a decode


def check_inputs(inputs: list[list[int]], limit: int, fields: list[str], constraint: str) -> None:
    empty = tuple(i for i, tokens in enumerate(inputs) if not tokens)
    too_long = tuple((i, len(tokens)) for i, tokens in enumerate(inputs) if len(tokens) > limit)
    if empty or too_long:
        raise UnfitInputs(empty, too_long, limit, fields, constraint)


class Embedder:
    """Packs waiting inputs into decodes of a pooled context and hands out their outputs (engine thread only).

    Pooling (mean, cls, last) reads a whole input from one ubatch, so the context's batch and ubatch are one size and
    no input may be longer. A decode takes as many waiting inputs as fit, oldest first, each its own sequence of one
    shared KV stream (the attention mask keeps them apart); the cells are cleared after it. `aligned`: each input
    starts on a ROW_ALIGN row (its vector the same batched or alone); else they are packed tight.
    """

    def __init__(self, pooled: Pooled, aligned: bool = True) -> None:
        self.ctx = pooled.ctx
        self.memory = llama_cpp.llama_get_memory(self.ctx)  # none for encoder-only models: nothing to clear
        self.n_batch = pooled.n_batch
        self.filler_seq = llama_cpp.llama_n_seq_max(self.ctx) - 1  # the last sequence id; the inputs take the others
        self.width = pooled.width
        self.normalize = pooled.normalize
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._align = ROW_ALIGN if aligned else 1  # an input starts on a multiple of it

    def plan(self, jobs: deque[EmbeddingJob]) -> list[Row]:
        """Under the loop's lock: the next decode's inputs, oldest first, while they fit the batch (aligned).

        Cancelled jobs, and jobs whose last inputs are planned now, leave the queue.
        """
        rows: list[Row] = []
        tokens = 0
        while jobs:
            job = jobs[0]
            while not job.cancelled and job.planned < len(job.inputs) and len(rows) < self.filler_seq:
                end = _align_up(tokens, self._align) + len(job.inputs[job.planned])
                if end > self.n_batch:
                    return rows
                rows.append((job, job.planned))
                job.planned += 1
                tokens = end
            if not job.cancelled and job.planned < len(job.inputs):
                return rows  # out of sequences
            jobs.popleft()
        return rows

    def run(self, rows: list[Row]) -> None:
        """One decode of the planned rows; each job whose last vector lands here is finished."""
        n = filler = 0
        for seq, (job, index) in enumerate(rows):
            while n % self._align:
                self._put(n, FILLER_TOKEN, filler, self.filler_seq)
                n, filler = n + 1, filler + 1
            for pos, token in enumerate(job.inputs[index]):
                self._put(n, token, pos, seq)
                n += 1
        self._batch.n_tokens = n
        rc = llama_cpp.llama_decode(self.ctx, self._batch)
        if rc == 0:
            for seq, (job, index) in enumerate(rows):
                job.vectors[index] = self._vector(seq)
                job.remaining -= 1
        else:
            log.error("embedding_decode_failed", status=rc, inputs=len(rows))
        if self.memory:
            llama_cpp.llama_memory_clear(self.memory, True)
        for job in dict.fromkeys(job for job, _ in rows):
            if rc != 0:
                self._fail(job, EmbeddingFailed(f"llama_decode failed with status {rc}"))
            elif job.remaining == 0 and not job.cancelled:
                job.finish([job.vectors[index] for index in range(len(job.inputs))])

    def _put(self, row: int, token: int, pos: int, seq: int) -> None:
        batch = self._batch
        batch.token[row], batch.pos[row], batch.n_seq_id[row] = token, pos, 1
        batch.seq_id[row][0], batch.logits[row] = seq, True  # pooling reads every row

    def _vector(self, seq: int) -> Vector:
        pooled = llama_cpp.llama_get_embeddings_seq(self.ctx, seq)
        raw = array("f", pooled[:self.width])
        if not self.normalize:  # a rank head's scores, as it computes them
            return raw
        # Euclidean norm, as llama-server's default (embd_normalize 2), summed in double precision.
        norm = math.hypot(*raw)
        scale = 1.0 / norm if norm > 0 else 0.0
        return array("f", [x * scale for x in raw])

    @staticmethod
    def _fail(job: EmbeddingJob, failure: EmbeddingFailed) -> None:
        if not job.cancelled:
            job.cancelled = True  # its other inputs are skipped
            job.finish(failure)

    def fail_all(self, jobs: deque[EmbeddingJob], message: str) -> None:
        """The worker is stopping: every queued job ends without vectors."""
        while jobs:
            self._fail(jobs.popleft(), EmbeddingFailed(message, stopped=True))

    def close(self) -> None:
        llama_cpp.llama_batch_free(self._batch)
