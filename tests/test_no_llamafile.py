"""A build without llamafile's GEMM: exact mode reuses answers too, and the text is still that of `off`.

Slow: it compiles llama.cpp with the no-llamafile preset (scripts/build-llama-cpp, about 5 minutes
on 2 cores, cached after) and points llama-cpp-python at those libraries with LLAMA_CPP_LIB_PATH. On such a
build the load-time check (worker/engine/numerics.py) finds an answer's one-token-at-a-time cells bitwise
what a prefill makes, so a conversation's next turn starts past the previous answer, not before it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, start_worker
from tests.test_prefix_cache import QUESTIONS, cached, converse


@pytest.fixture(scope="module")
def no_llamafile_build() -> Path:
    out = subprocess.run([str(REPO / "scripts" / "build-llama-cpp"), "cpu-native,no-llamafile", "llama"],
                         stdout=subprocess.PIPE, text=True, check=True, timeout=3600,
                         env={**os.environ, "PYTHON": sys.executable})
    return Path(out.stdout.strip().splitlines()[-1])


def loaded(log: str) -> dict:
    return next(json.loads(line) for line in log.splitlines() if '"model_loaded"' in line)


@pytest.mark.slow
async def test_exact_mode_reuses_answers_and_keeps_the_text(http, tmp_path, no_llamafile_build):
    env = {"LLAMA_CPP_LIB_PATH": str(no_llamafile_build)}
    common = ("--parallel", "3", "--ctx-size", "6144")
    exact = start_worker(tmp_path, *common, env=env)
    off = start_worker(tmp_path, *common, "--prefix-cache", "off", env=env)
    try:
        # The conversations run side by side on the exact worker, one after another on `off`.
        reused = await asyncio.gather(*(converse(http, exact.url, questions) for questions in QUESTIONS))
        cold = [await converse(http, off.url, questions) for questions in QUESTIONS]
        assert loaded(exact.log())["answers_reused"] is True
    finally:
        assert exact.stop() == 0 and off.stop() == 0
    assert [[t["answer"] for t in c] for c in reused] == [[t["answer"] for t in c] for c in cold]
    for conversation in reused:
        hits = cached(conversation)
        # Each later turn starts past the previous turn's prompt: into (or past) the answer's decode-made cells.
        assert all(hit > turn["usage"]["prompt_tokens"] for hit, turn in zip(hits[1:], conversation)), hits
