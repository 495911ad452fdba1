"""An outside fuzzer against a real worker: schemathesis reads /openapi.json, sends what it allows and
what it forbids, and checks every answer (status, content type, body and SSE events) against it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, start_worker
from worker.api.openapi import decimal_below

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
SEED = "20251115"  # a fixed seed: the same cases every run, so a failure reproduces


def test_schemathesis_finds_no_failure(model_path, tmp_path):
    # One llama.cpp thread: on a busy 2-core machine two threads wait on each other at every barrier,
    # and a 1-token request can take 10 s (past the response-time check). --embeddings: that route too.
    worker = start_worker(tmp_path, "--ctx-size", "4096", "--parallel", "2", "--threads", "1", "--embeddings")
    try:
        # --max-examples bounds the work (--max-time would not: it repeats the fuzzing until it is spent);
        # the hooks keep each generation short and excuse only what a schema cannot say.
        run = subprocess.run(
            [str(SCHEMATHESIS), "run", worker.url + "/openapi.json", "--checks", "all",
             "--max-examples", "25", "--seed", SEED, "--generation-database", "none", "--workers", "1",
             "--request-timeout", "30", "--max-response-time", "20", "--no-color", "--output-sanitize", "false"],
            cwd=tmp_path, capture_output=True, text=True, timeout=240,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks", "PYTHONPATH": str(REPO)},
        )
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    assert run.returncode == 0, run.stdout[-30000:] + run.stderr[-3000:]


def test_token_ids_in_the_document_are_exactly_the_models():
    """logit_bias keys: the decimal strings of 0..n_vocab-1 (leading zeros too, as the validator's int() reads)."""
    for n_vocab in (1, 10, 11, 100, 32000, 49152, 151936):
        pattern = re.compile(decimal_below(n_vocab))
        for i in [*range(min(n_vocab + 20, 1200)), *range(n_vocab - 1100, n_vocab + 1100), 10 * n_vocab]:
            for text in (str(i), f"00{i}"):
                assert bool(pattern.match(text)) == (0 <= i < n_vocab), (n_vocab, text)
        assert not any(pattern.match(text) for text in ("", "-1", "1a", "\u00b2"))
