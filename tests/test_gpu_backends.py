"""GPU backends that run: the guarantee said at startup; slow: Vulkan on Mesa's lavapipe, CUDA compiled for one
architecture, the GPU check rehearsed from its bundle, and the cuda and vulkan Docker images.

The slow tests compile llama.cpp (scripts/build-llama-cpp, cached after the first run) and point llama-cpp-python at
those libraries with LLAMA_CPP_LIB_PATH, as tests/test_rpc.py does. Vulkan needs `scripts/install-system-deps build
vulkan` (libvulkan-dev, glslc, spirv-headers; mesa-vulkan-drivers gives lavapipe), CUDA an nvcc (scripts/cuda-cmake-args
brings cuBLAS when the toolkit lacks it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, start_worker, wait_healthy
from tests.helpers import openai_stream
from worker.backends_report import render
from worker.engine.native.backends import BuildInfo
from worker.engine.exactness.guarantee import guarantee
from worker.engine.exactness.load_check import Numerics
from worker.engine.modes import CacheMode

@pytest.mark.parametrize(("mode", "numerics", "backend", "rpc", "expected"), [
    (CacheMode.FAST, Numerics(None, None), "cpu", False, "none"),
    (CacheMode.EXACT, Numerics(True, True, trusted=True), "cpu", False, "bitwise"),
    (CacheMode.OFF, Numerics(None, None), "cpu", False, "bitwise"),
    (CacheMode.EXACT, Numerics(True, False, trusted=True), "cpu", False, "cache-only"),
    (CacheMode.EXACT, Numerics(True, True), "vulkan", False, "measured"),
    (CacheMode.EXACT, Numerics(False, True), "cuda", False, "measured"),
    (CacheMode.EXACT, Numerics(True, True), "cpu", True, "measured"),
])
def test_the_guarantee_follows_backend_mode_and_measurement(mode, numerics, backend, rpc, expected):
    promise = guarantee(mode, numerics, backend, rpc)
    assert promise.name == expected
    assert promise.full == (expected == "bitwise")
    if expected == "measured":
        # The sentence says what was measured, never more.
        assert backend in promise.holds and f"batch_invariant={numerics.batch_invariant}" in promise.holds


def test_backends_says_a_gpu_build_found_no_device():
    """A cuda build on a machine whose driver is missing lists the backend but no device: say that, not 'rebuild'."""
    info = BuildInfo(version="0.3.36", library_path="/x", backends=("cuda", "cpu"), devices=(), gpu_offload=False,
                     rpc=False, system_info="CUDA : ARCHS = 900 | CPU : AVX2 = 1")
    line = next(line for line in render(info).splitlines() if line.startswith("gpu offload"))
    assert "the build has cuda but found no device for it" in line and "rebuild" not in line


def test_startup_says_which_guarantee_holds(worker):
    said = [json.loads(line) for line in worker.log().splitlines() if '"exactness_guarantee"' in line]
    assert [(line["guarantee"], line["level"]) for line in said] == [("bitwise", "info")], said


# --- slow: Vulkan on lavapipe ----------------------------------------------------------------------------------


# ggml-vulkan leaves a CPU-type device such as lavapipe out unless it is named.
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0"}


def _vulkan_build_tools() -> bool:
    return bool(shutil.which("glslc")) and Path("/usr/include/vulkan/vulkan.h").exists()


@pytest.fixture(scope="module")
def vulkan_build() -> Path:
    if not _vulkan_build_tools():
        pytest.skip("no Vulkan build tools: scripts/install-system-deps build vulkan (and mesa-vulkan-drivers)")
    out = subprocess.run([str(REPO / "scripts" / "build-llama-cpp"), "vulkan", "llama", "llama-server"],
                         stdout=subprocess.PIPE, text=True, check=True, timeout=7200,
                         env={**os.environ, "PYTHON": sys.executable})
    return Path(out.stdout.strip().splitlines()[-1])


def backends_json(lib: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "worker", "backends", "--json"], capture_output=True, text=True,
                         check=True, cwd=REPO, env={**os.environ, **LAVAPIPE, "LLAMA_CPP_LIB_PATH": str(lib)},
                         timeout=120)
    return json.loads(out.stdout)


@pytest.mark.slow
def test_backends_lists_lavapipe_and_its_memory(vulkan_build):
    info = backends_json(vulkan_build)
    assert "vulkan" in info["servable"] and info["gpu_offload"] is True
    [device] = [d for d in info["devices"] if d["backend"] == "vulkan"]
    assert "llvmpipe" in device["description"] and device["kind"] == "gpu", device
    assert 0 < device["memory_free"] <= device["memory_total"]


@pytest.mark.slow
async def test_vulkan_serves_with_every_layer_offloaded(http, tmp_path, model_path, vulkan_build):
    env = {**LAVAPIPE, "LLAMA_CPP_LIB_PATH": str(vulkan_build)}
    worker = start_worker(tmp_path, "--model", str(model_path), "--backend", "vulkan", "--parallel", "2",
                          "--ctx-size", "2048", "--log-level", "debug", env=env, wait=False)
    try:
        wait_healthy(worker, timeout=600)  # lavapipe computes on the CPU: the load-time check takes a while
        streamed = await openai_stream(http, worker.url + "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Name a river."}], "max_tokens": 16, "temperature": 0})
        assert streamed.text.strip() and streamed.finish_reason in ("stop", "length")
        async with http.get(worker.url + "/health") as response:
            health = await response.json()
        log = worker.log()
    finally:
        assert worker.stop() == 0
    assert "offloaded 31/31 layers to GPU" in log
    # Weights, KV cells and compute buffers on the device: more than the model file.
    assert health["vram_bytes"] > model_path.stat().st_size
    exactness = health["exactness"]
    # On a GPU backend exact mode runs without flash attention, measures, and does not trust what it measured.
    assert (exactness["flash_attn"], exactness["cache_type_k"], exactness["cache_type_v"]) == ("off", "f16", "f16")
    assert isinstance(exactness["decoded_cells_exact"], bool) and isinstance(exactness["batch_invariant"], bool)
    assert exactness["answers_reused"] is False
    said = [json.loads(line) for line in log.splitlines() if '"exactness_guarantee"' in line]
    assert [(line["guarantee"], line["level"]) for line in said] == [("measured", "warning")]
    assert f"batch_invariant={exactness['batch_invariant']}" in said[0]["holds"]


@pytest.mark.slow
def test_exact_mode_refuses_flash_attention_on_vulkan(tmp_path, model_path, vulkan_build):
    worker = start_worker(tmp_path, "--model", str(model_path), "--backend", "vulkan", "--flash-attn", "on",
                          env={**LAVAPIPE, "LLAMA_CPP_LIB_PATH": str(vulkan_build)}, wait=False)
    assert worker.process.wait(120) != 0
    assert "--flash-attn on needs the cpu backend" in worker.log()


# --- slow: CUDA compiled here, for one architecture ------------------------------------------------------------

CUDA_ARCH = "90-real"  # Hopper (H100, H200): the GPUs lent to this project


@pytest.fixture(scope="module")
def cuda_build() -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc: install the CUDA toolkit, or scripts/install-cuda-toolkit 13.0 /usr/local/cuda")
    env = {**os.environ, "PYTHON": sys.executable, "CMAKE_ARGS": f"-DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCH}",
           "PATH": f"{Path(nvcc).parent}:{os.environ['PATH']}"}
    out = subprocess.run([str(REPO / "scripts" / "build-llama-cpp"), "cuda", "llama", "llama-server"],
                         stdout=subprocess.PIPE, text=True, check=True, timeout=4 * 3600, env=env)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_cuda_preset_compiles_for_one_architecture(cuda_build):
    library = cuda_build / "libggml-cuda.so"
    exported = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                              check=True).stdout
    assert " ggml_backend_cuda_reg" in exported and " ggml_backend_cuda_init" in exported
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    assert "libcublas.so." in needed and "libcudart.so." in needed
    # Device code for sm_90 alone: the fat binary names no other architecture.
    strings = subprocess.run(["strings", "-a", str(library)], capture_output=True, text=True, check=True).stdout
    assert "sm_90" in strings and "sm_86" not in strings and "sm_120" not in strings
