"""A converted SafeTensors folder, served, answers as llama.cpp's own F16 of the test model does (see
tests/model/test_convert.py). A probe (two 135M workers at 8 slots and a whole conversion, ~60 s on 2 cores): make
test-probes, which CI runs after make test."""

from __future__ import annotations

import pytest

from tests.conftest import start_worker
from tests.convert_helpers import hf, post  # noqa: F401 (a fixture)

pytestmark = pytest.mark.probe

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "List three colors:"]


def _greedy(url: str) -> list[str]:
    """64 greedy tokens for each prompt on both routes, one request at a time: what conversion must keep is the
    weights, whatever runs beside a request (that F16 rows ignore their batch, on the batch-invariant build exact
    mode loads for them, is tests/e2e/test_f16_weights.py's)."""
    body = {"max_tokens": 64, "temperature": 0}
    calls = [(url + "/v1/completions", {**body, "prompt": p}) for p in PROMPTS]
    calls += [(url + "/v1/chat/completions", {**body, "messages": [{"role": "user", "content": p}]}) for p in PROMPTS]
    answers = [post(*call) for call in calls]
    return [a["choices"][0].get("text") or a["choices"][0]["message"]["content"] for a in answers]


def test_served_folder_answers_as_llama_cpp_f16(hf, tmp_path):
    args = ("--parallel", "8", "--ctx-size", "2048")
    reference = start_worker(tmp_path, "--model", str(hf.reference_f16), *args)
    try:
        expected = _greedy(reference.url)
    finally:
        assert reference.stop() == 0
    served = start_worker(tmp_path, "--model", str(hf.f32), *args, env={"LLM_WORKER_CACHE": str(tmp_path / "cache")})
    try:
        assert _greedy(served.url) == expected
        assert '"convert_done"' in served.log()
    finally:
        assert served.stop() == 0
    assert all(len(text) > 20 for text in expected)
