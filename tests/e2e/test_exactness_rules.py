"""Attention flags that break exact mode: serve refuses them in one line, before loading the model."""

from __future__ import annotations

from tests.e2e.test_cli import one_line_failure, run_cli
from worker.engine.exactness.build_choice import LIB_PATH_ENV, default_dir


def test_serve_refuses_them_in_one_line_before_loading(tmp_path):
    """Without the batch-invariant build (here: llama-cpp-python's own named); with it, f16/f16 is exact mode's pair."""
    result = run_cli("serve", "--model", str(tmp_path / "none.gguf"), "--flash-attn", "on", "--cache-type-k", "f16",
                     "--cache-type-v", "f16", env={LIB_PATH_ENV: str(default_dir())})
    assert "--cache-type-v other than f16" in one_line_failure(result)
