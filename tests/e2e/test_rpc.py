"""serve --rpc: the model's layers on two ggml-rpc-server processes on loopback, same greedy text as local.

Slow: it compiles llama.cpp with the rpc preset (scripts/build-llama-cpp rpc, about 5
minutes on 2 cores, cached after) and points llama-cpp-python at those libraries with
LLAMA_CPP_LIB_PATH, so the worker and the servers run the same RPC build.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, start_worker
from tests.helpers import completion_text, openai_once

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


@pytest.fixture(scope="module")
def rpc_build() -> Path:
    # llm-worker-chat: the chat ABI the worker loads from beside libllama (a model with a chat template needs it)
    targets = ["llama", "ggml-rpc-server", "llm-worker-chat"]
    out = subprocess.run([str(REPO / "scripts" / "build-llama-cpp"), "rpc", *targets],
                         stdout=subprocess.PIPE, text=True, check=True, timeout=3600,
                         env={**os.environ, "PYTHON": sys.executable})
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def rpc_servers(rpc_build: Path, tmp_path: Path):
    ports = [free_port(), free_port()]
    servers = [subprocess.Popen([str(rpc_build / "ggml-rpc-server"), "--host", "127.0.0.1", "--port", str(port),
                                 "--threads", "1"], stdout=(tmp_path / f"rpc-{port}.log").open("wb"),
                                stderr=subprocess.STDOUT) for port in ports]
    yield ",".join(f"127.0.0.1:{port}" for port in ports)
    for server in servers:
        server.terminate()
        server.wait(10)


async def greedy(http, url: str) -> list[str]:
    return [completion_text(await openai_once(http, url + "/v1/completions",
                                              {"prompt": p, "max_tokens": 32, "temperature": 0})) for p in PROMPTS]


async def health(http, url: str) -> dict:
    async with http.get(url + "/health") as response:
        return await response.json()


@pytest.mark.slow
async def test_layers_spread_over_two_rpc_servers_give_the_local_text(http, tmp_path, model_path, rpc_build,
                                                                       rpc_servers):
    env = {"LLAMA_CPP_LIB_PATH": str(rpc_build)}
    common = ("--model", str(model_path), "--parallel", "1", "--ctx-size", "1024", "--threads", "1")
    # With --rpc exact mode runs without flash attention (exactness/kv_plan.py): the local reference computes the
    # same way.
    local = start_worker(tmp_path, *common, "--flash-attn", "off", env=env)
    try:
        expected = await greedy(http, local.url)
        assert (await health(http, local.url))["vram_bytes"] == 0  # nothing left this process
    finally:
        assert local.stop() == 0
    remote = start_worker(tmp_path, *common, "--rpc", rpc_servers, "--log-level", "debug", env=env)
    try:
        assert await greedy(http, remote.url) == expected
        # The servers' free memory fell by the layers, KV cells and buffers they took (weights alone ~90 MB).
        assert (await health(http, remote.url))["vram_bytes"] > 50 * 2**20
        log = remote.log()
    finally:
        assert remote.stop() == 0
    # llama.cpp's loader split the layers over both servers.
    assert "assigned to device RPC0" in log and "assigned to device RPC1" in log
    assert log.count("rpc_server_added") == 2
