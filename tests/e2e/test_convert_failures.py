"""Broken folders fail with one line and leave nothing in the cache; concurrent conversions happen once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, start_worker, wait_healthy
from tests.convert_helpers import cache_files, oracle, post
from tests.fixtures.tiny_models import make_tiny


def convert_cli(folder: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "worker", "convert", str(folder), "--log-format", "json"],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "LLM_WORKER_CACHE": str(cache)})


def _no_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()


def _corrupt_header(folder: Path) -> None:
    path = sorted(folder.glob("*.safetensors"))[0]
    data = bytearray(path.read_bytes())
    data[8:40] = b"\xff" * 32  # the JSON header's first bytes
    path.write_bytes(bytes(data))


def _truncated_shard(folder: Path) -> None:
    shard = folder / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def _unsupported(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["MambaForCausalLM"]}))


def _unknown_pre_tokenizer(folder: Path) -> None:
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True  # text now starts with a space
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))


BROKEN = {
    "no tokenizer": (_no_tokenizer, "has no tokenizer (neither tokenizer.json nor tokenizer.model)"),
    "corrupt header": (_corrupt_header, "corrupt SafeTensors header"),
    "truncated shard": (_truncated_shard, "lies beyond the end of the file"),
    "unknown pre-tokenizer": (_unknown_pre_tokenizer, "unrecognised BPE pre-tokenizer"),
    "unsupported architecture": (_unsupported, "architecture 'MambaForCausalLM' cannot be converted; supported: "),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_folder_is_one_line_and_leaves_nothing(case, model_path, tmp_path):
    folder = make_tiny("qwen3", tmp_path / "model", oracle(model_path).f32, shards=2)
    breaks, expected = BROKEN[case]
    breaks(folder)
    result = convert_cli(folder, tmp_path / "cache")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("llm-worker: error: ") and expected in line, line
    assert cache_files(tmp_path / "cache") == []


def test_unsupported_architecture_lists_the_supported_ones(model_path, tmp_path):
    folder = make_tiny("qwen3", tmp_path / "model", oracle(model_path).f32)
    _unsupported(folder)
    line = convert_cli(folder, tmp_path / "cache").stderr.strip().splitlines()[-1]
    for name in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM"):
        assert name in line


def test_serve_of_a_broken_folder_fails_with_one_line(model_path, tmp_path):
    folder = make_tiny("qwen3", tmp_path / "model", oracle(model_path).f32)
    _corrupt_header(folder)
    result = subprocess.run([sys.executable, "-m", "worker", "serve", "--port", "0", "--model", str(folder)],
                            capture_output=True, text=True, cwd=REPO, timeout=120,
                            env={**os.environ, "LLM_WORKER_CACHE": str(tmp_path / "cache")})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("llm-worker: error: ")
    assert cache_files(tmp_path / "cache") == []


def test_two_workers_converting_the_same_folder_convert_once_and_both_serve(model_path, tmp_path):
    folder = oracle(model_path).f32  # 540 MB: long enough for the second worker to arrive mid-conversion
    env = {"LLM_WORKER_CACHE": str(tmp_path / "cache")}
    args = ("--model", str(folder), "--parallel", "1", "--ctx-size", "256", "--threads", "1")
    first = start_worker(tmp_path, *args, env=env, wait=False)
    workers = [first]
    try:
        # The second starts only once the first is converting, so it must find the lock held.
        deadline = time.monotonic() + 120
        while '"convert_start"' not in first.log():
            assert first.process.poll() is None and time.monotonic() < deadline, first.log()[-3000:]
            time.sleep(0.05)
        workers.append(start_worker(tmp_path, *args, env=env, wait=False))
        for worker in workers:
            wait_healthy(worker)
        for worker in workers:
            answer = post(worker.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2, "temperature": 0})
            assert answer["usage"]["completion_tokens"] == 2
        first_log, second_log = (worker.log() for worker in workers)
        assert '"convert_start"' in first_log and '"convert_start"' not in second_log
        waited, hit = second_log.find('"waiting_for_conversion"'), second_log.find('"converted_cache_hit"')
        assert 0 <= waited < hit, second_log[-3000:]  # it waited on the lock, then reused the file
        assert [p.suffix for p in cache_files(tmp_path / "cache")] == [".gguf"]
    finally:
        for worker in workers:
            assert worker.stop() == 0
