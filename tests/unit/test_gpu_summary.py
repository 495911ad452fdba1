"""What a GPU loan's check leaves to commit: its speeds as a summary in bench/results/summaries/' format, the
machine named by its device, and the commit the tree was sent from where the copy has no history."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

from bench.config import BenchConfig
from bench.gpu_check import Perf, Step, loan_environment, summary_figures
from bench.report import source_commit, write_summary


def config(model: Path, out: Path) -> BenchConfig:
    return BenchConfig(model=model, servers=("llm-worker",), prompt_lengths=(), concurrencies=(), requests_per_client=1,
                       level_timeout_s=1.0, max_tokens=1, parallel=8, ctx_size=8, threads=1, temperature=0.0, seed=1,
                       llama_server_bin=None, out_dir=out, publish=False)


def test_a_loan_summary_names_the_device_and_leaves_failed_servers_out(tmp_path, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"\0" * 4096)
    monkeypatch.setattr(sys, "argv", ["bench/gpu_check.py", "--backend", "cuda"])
    devices = {"devices": [{"backend": "cuda", "description": "NVIDIA H200"}, {"backend": "cpu", "description": "x"}]}
    steps = [Step("backends lists the device", True, "", devices)]
    env = loan_environment(config(model, tmp_path), Namespace(backend="cuda"), steps)
    perf = [Perf("llm-worker exact", 600.0, 1800.0, 150.0), Perf("llama-server", error="did not start")]
    path = write_summary("gpu-check", env, summary_figures(perf), directory=tmp_path / "summary")
    run = json.loads(path.read_text())
    assert path == tmp_path / "summary" / "gpu-check.json"
    assert run["machine"].startswith("NVIDIA H200 (cuda) on ") and run["rounds"] == 1
    assert run["command"] == "bench/gpu_check.py --backend cuda"
    assert run["servers"] == {"llm-worker exact": {"decode_1_tok_s": 600.0, "decode_8_tok_s": 1800.0,
                                                   "prefill_ms": 150.0}}


def test_a_tree_without_history_takes_its_commit_from_bench_commit(tmp_path, monkeypatch):
    def no_git(*args, **kwargs):
        return subprocess.CompletedProcess(args, 128, stdout="", stderr="not a git repository")

    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setenv("BENCH_COMMIT", "4481e8a")
    assert source_commit() == "4481e8a"
    monkeypatch.delenv("BENCH_COMMIT")
    assert source_commit() == ""



def test_a_summary_names_the_command_as_typed(tmp_path, monkeypatch):
    """bench/run.py hands a workload an argv whose first word names both (`bench/run.py chat`, then `chat`)."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"\0" * 4096)
    monkeypatch.setattr(sys, "argv", ["bench/run.py chat", "chat", "--rounds", "3"])
    env = loan_environment(config(model, tmp_path), Namespace(backend="cuda"), [])
    run = json.loads(write_summary("chat", env, {}, directory=tmp_path).read_text())
    assert run["command"] == "bench/run.py chat --rounds 3"
