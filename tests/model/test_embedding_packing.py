"""Embedding inputs packed into a pooled decode: on ROW_ALIGN rows with filler between (exact and off modes: each
vector the same batched or alone, tests/e2e/test_embeddings.py), or tight (fast mode, which promises no batch
invariance): more inputs a decode, the same vectors to within the batch's rounding."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.engine.config import EngineConfig
from worker.engine.native.model import LlamaModel
from worker.engine.pooling.embeddings import ROW_ALIGN, Embedder, EmbeddingJob, Outcome, Row

SENTENCES = [f"Sentence number {i} is about {topic}." for i, topic in enumerate(
    ["rivers", "cats", "the sea", "bread", "trains", "music", "snow", "glass"] * 5)]


@pytest.fixture(scope="module")
def model(model_path: Path) -> Iterator[LlamaModel]:
    loaded = LlamaModel(model_path, EngineConfig(ctx_size=512, parallel=1, embeddings=True, prefix_cache="fast"))
    yield loaded
    loaded.close()


def embed_all(embedder: Embedder, inputs: list[list[int]]) -> tuple[list[list[Row]], Outcome]:
    """Every input through the embedder's decodes: each decode's rows, and the job's vectors."""
    outcome: list[Outcome] = []
    jobs = deque([EmbeddingJob(inputs, outcome.append)])
    decodes = []
    while jobs:
        decodes.append(rows := embedder.plan(jobs))
        embedder.run(rows)
    return decodes, outcome[0]


def test_tight_packing_fits_more_inputs_a_decode_and_gives_the_same_vectors(model):
    inputs = [model.tokenize(text) for text in SENTENCES]
    pooled = model.embedding
    assert pooled is not None and all(len(tokens) <= ROW_ALIGN for tokens in inputs)
    aligned, tight = Embedder(pooled, aligned=True), Embedder(pooled, aligned=False)
    try:
        aligned_decodes, aligned_vectors = embed_all(aligned, inputs)
        tight_decodes, tight_vectors = embed_all(tight, inputs)
    finally:
        aligned.close()
        tight.close()
    # Each input padded to 16 rows: a decode of pooled.n_batch rows holds n_batch / 16 of them; tight, as many as
    # their tokens fit.
    assert [len(rows) for rows in aligned_decodes] == [16, 16, 8] and pooled.n_batch == 256
    per_decode = [len(rows) for rows in tight_decodes]
    assert sum(per_decode) == len(inputs) and len(per_decode) == 2 and per_decode[0] > 16, per_decode
    assert sum(len(inputs[index]) for _, index in tight_decodes[0]) <= pooled.n_batch
    assert isinstance(aligned_vectors, list) and isinstance(tight_vectors, list)
    for a, t in zip(aligned_vectors, tight_vectors, strict=True):
        assert math.fsum(x * y for x, y in zip(a, t)) > 0.9999  # unit vectors: cosine
