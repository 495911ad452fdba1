"""Flags on the batch-invariant build: K and V cells both f16 with flash attention on, which exact mode refuses on
llama-cpp-python's own build (tests/*/test_exactness_rules.py), pass the checks made before a model loads when the
build `make install` puts in place is the one exact mode will load."""

from __future__ import annotations

from tests.e2e.test_cli import one_line_failure, run_cli


def test_f16_cells_with_flash_attention_on_pass_the_flag_checks(tmp_path):
    missing = tmp_path / "none.gguf"
    result = run_cli("serve", "--model", str(missing), "--flash-attn", "on", "--cache-type-k", "f16",
                     "--cache-type-v", "f16")
    line = one_line_failure(result)
    assert "--cache-type-v" not in line and str(missing) in line, line
