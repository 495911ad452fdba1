"""Every bench report says what its llama-server was built from, read from the build's own record: a ratio against
a peer without our patches measures the patches as much as the worker (docs/benchmarks.md, "The README's
comparison")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from bench.config import BenchConfig
from bench.report import machine_line, peer_patches


@pytest.mark.parametrize(("record", "says"), [
    ("patches=0123abcd\nflags=cpu-native\n",
     "built from the same patched source (patch set 0123abcd), the batch-invariance switch off"),
    ("patches=\nflags=cpu-native\n", "llama.cpp as upstream ships it, none of our patches"),
    (None, "built elsewhere"),
], ids=["patched", "upstream", "no-record"])
def test_a_report_says_what_its_llama_server_was_built_from(tmp_path: Path, record: str | None, says: str):
    binary = tmp_path / "llama-server"
    binary.write_bytes(b"")
    if record is not None:
        (tmp_path / "llm-worker-build").write_text(record)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"\0" * 1024)
    cfg = cast(BenchConfig, SimpleNamespace(model=model))
    env = {"cpu": "cpu", "cores": 2, "date": "2026-12-07", "load_before": 0.1,
           "llama_server_version": "version: 1 (abc)", "llama_server_patches": peer_patches(binary)}
    lines = machine_line(cfg, env).split("\n")
    assert lines[1] == f"- llama-server: version: 1 (abc); {says}", lines
    del env["llama_server_version"]  # a run without llama-server (a worker beside itself) says nothing of one
    assert machine_line(cfg, env).count("\n") == 0
