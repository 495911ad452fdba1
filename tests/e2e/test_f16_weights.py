"""F16 weights on the default install: exact mode loads the batch-invariant build
(worker/engine/exactness/build_choice.py), so the load-time check finds rows independent of their batch and an
answer's one-token-at-a-time cells bitwise what a prefill makes. Conversations side by side equal `off` one by one,
and each turn starts past the previous answer. `make install` builds that library (Makefile);
tests/model/test_exactness_rules.py holds the choice per weight type."""

from __future__ import annotations

import json

from tests.e2e.test_prefix_cache import conversations_beside_off


def loaded(log: str, event: str = "model_loaded") -> dict:
    return next(json.loads(line) for line in log.splitlines() if f'"{event}"' in line)


async def test_f16_weights_reuse_answers_side_by_side_and_equal_off(http, quantized, tmp_path):
    side = await conversations_beside_off(http, tmp_path, quantized("f16"))
    expected = {"library": "batch-invariant", "batch_invariant": True, "decoded_cells_exact": True,
                "answers_reused": True}
    assert side.exactness | expected == side.exactness, side.exactness
    assert loaded(side.exact.log())["library"] == "batch-invariant"
    assert side.off is not None and loaded(side.off.log())["library"] == "batch-invariant"
    # The startup line says whose build that is: make install's one compile, with our patches.
    chosen = loaded(side.exact.log(), "library_chosen")
    assert chosen["path"].endswith("lib/llm-worker/batch-invariant"), chosen
    assert chosen["built_by"].startswith("scripts/build-llama-cpp, preset cpu-native, our patches (set "), chosen
