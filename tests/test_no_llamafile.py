"""F16 weights on the default install: exact mode loads the no-llamafile build (worker/engine/library.py), so the
load-time check finds rows independent of their batch and an answer's one-token-at-a-time cells bitwise what a
prefill makes. Conversations side by side equal `off` one by one, and each turn starts past the previous answer.
`make install` builds that library (Makefile); tests/test_exactness_rules.py holds the choice per weight type."""

from __future__ import annotations

import asyncio
import json

from tests.conftest import start_worker
from tests.test_prefix_cache import QUESTIONS, cached, converse


def loaded(log: str) -> dict:
    return next(json.loads(line) for line in log.splitlines() if '"model_loaded"' in line)


async def test_f16_weights_reuse_answers_side_by_side_and_equal_off(http, quantized, tmp_path):
    flags = ("--model", str(quantized("f16")), "--parallel", "2", "--ctx-size", "4096")
    exact, off = start_worker(tmp_path, *flags), start_worker(tmp_path, *flags, "--prefix-cache", "off")
    try:
        reused = await asyncio.gather(*(converse(http, exact.url, q) for q in QUESTIONS[:2]))
        cold = [await converse(http, off.url, q) for q in QUESTIONS[:2]]
        async with http.get(exact.url + "/health") as response:
            exactness = (await response.json())["exactness"]
    finally:
        assert exact.stop() == 0 and off.stop() == 0
    expected = {"library": "no-llamafile", "batch_invariant": True, "decoded_cells_exact": True, "answers_reused": True}
    assert exactness | expected == exactness, exactness
    assert loaded(exact.log())["library"] == "no-llamafile" and loaded(off.log())["library"] == "no-llamafile"
    assert [[t["answer"] for t in c] for c in reused] == [[t["answer"] for t in c] for c in cold]
    for conversation in reused:
        hits = cached(conversation)
        assert all(hit > prev["usage"]["prompt_tokens"] for prev, hit in zip(conversation, hits[1:])), hits
