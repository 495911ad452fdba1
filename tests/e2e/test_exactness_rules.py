"""Attention flags that break exact mode: serve refuses them in one line, before loading the model."""

from __future__ import annotations

from tests.e2e.test_cli import one_line_failure, run_cli


def test_serve_refuses_them_in_one_line_before_loading(tmp_path):
    result = run_cli("serve", "--model", str(tmp_path / "none.gguf"), "--flash-attn", "on", "--cache-type-k", "f16",
                     "--cache-type-v", "f16")
    assert "--cache-type-v other than f16" in one_line_failure(result)
