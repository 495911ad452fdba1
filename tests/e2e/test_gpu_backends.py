"""GPU backends that run: the guarantee said at startup; slow (make test-gpu): Vulkan on Mesa's lavapipe, CUDA
compiled for one architecture, the GPU check rehearsed from its bundle, and the cuda and vulkan Docker images. The
rules without a worker are tests/unit/test_gpu_backends.py.

The slow tests compile llama.cpp (scripts/build-llama-cpp, cached after the first run) and point llama-cpp-python at
those libraries with LLAMA_CPP_LIB_PATH, as tests/e2e/test_rpc.py does. Vulkan needs `scripts/install-system-deps build
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
from tests.docker_helpers import DOCKER, build_image, docker_available
from tests.helpers import openai_once, openai_stream

MIB = 2**20
# A run command's limit on what one call carries (the checkout and its carried paths together).
CALL_LIMIT = 64 * MIB


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
        cold, cached = [await openai_once(http, worker.url + "/v1/chat/completions", LONG_GREEDY) for _ in range(2)]
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
    # What lavapipe measures (docs/backends.md, docs/cache-and-exactness.md "On a GPU"): a row's logits move with the
    # rows beside it, and cells made by decoding differ from a prefill's. Not None: the check ran.
    assert (exactness["decoded_cells_exact"], exactness["batch_invariant"]) == (False, False), exactness
    assert exactness["answers_reused"] is False
    said = [json.loads(line) for line in log.splitlines() if '"exactness_guarantee"' in line]
    assert [(line["guarantee"], line["level"]) for line in said] == [("measured", "warning")]
    assert "it measured decoded_cells_exact=False, batch_invariant=False" in said[0]["holds"], said
    # A row that moved with its batch is said at startup too, with what keeps requests apart.
    limited = [json.loads(line) for line in log.splitlines() if '"exactness_limited"' in line]
    assert any("--parallel 1" in line["fix"] for line in limited), limited
    # What "measured" still promises: greedy text does not depend on the prompt cache, since only whole prefilled
    # micro-batches are reused. The same request again starts from the first's cells and gives its very logits.
    assert cached["usage"]["prompt_tokens_details"]["cached_tokens"] >= 512, cached["usage"]
    assert cold["usage"]["prompt_tokens"] > 512 + 64  # past one micro-batch, so part of it is prefilled again
    assert cached["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
    assert _logprobs(cached) == _logprobs(cold)


# A prompt past one 512-row micro-batch, answered greedily with each token's log probability.
LONG_GREEDY = {"messages": [{"role": "user", "content": "Summarize: " + "The river runs past the old mill. " * 80}],
               "max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 2}


def _logprobs(answer: dict) -> list[tuple[str, float, list[float]]]:
    return [(token["token"], token["logprob"], [alt["logprob"] for alt in token["top_logprobs"]])
            for token in answer["choices"][0]["logprobs"]["content"]]


@pytest.mark.slow
def test_exact_mode_refuses_flash_attention_on_vulkan(tmp_path, model_path, vulkan_build):
    worker = start_worker(tmp_path, "--model", str(model_path), "--backend", "vulkan", "--flash-attn", "on",
                          env={**LAVAPIPE, "LLAMA_CPP_LIB_PATH": str(vulkan_build)}, wait=False)
    assert worker.process.wait(120) != 0
    assert "--flash-attn on needs the cpu backend" in worker.log()


@pytest.mark.slow
async def test_fast_mode_on_lavapipe_runs_without_flash_attention_and_says_why(http, tmp_path, model_path,
                                                                             vulkan_build):
    """Mesa's lavapipe crashes in flash attention over one KV stream per slot (bench/probes/vulkan_streams.py):
    there fast mode runs without it, says so at startup and on /health, and refuses `--flash-attn on`."""
    env = {**LAVAPIPE, "LLAMA_CPP_LIB_PATH": str(vulkan_build)}
    flags = ("--model", str(model_path), "--backend", "vulkan", "--prefix-cache", "fast", "--parallel", "2",
             "--ctx-size", "2048")
    worker = start_worker(tmp_path, *flags, env=env, wait=False)
    try:
        wait_healthy(worker, timeout=600)
        async with http.get(worker.url + "/health") as response:
            exactness = (await response.json())["exactness"]
        log = worker.log()
    finally:
        assert worker.stop() == 0
    assert exactness["flash_attn"] == "off" and "lavapipe" in exactness["attention_workaround"]
    said = [line for line in (json.loads(text) for text in log.splitlines() if '"attention_workaround"' in text)
            if line["event"] == "attention_workaround"]
    assert [line["level"] for line in said] == ["warning"] and said[0]["reason"] == exactness["attention_workaround"]
    refused = start_worker(tmp_path, *flags, "--flash-attn", "on", env=env, wait=False)
    assert refused.process.wait(120) != 0
    assert "Mesa's lavapipe crashes in flash attention" in refused.log()


def _hiding_python(tmp_path: Path, modules: set[str]) -> Path:
    """A python that cannot import `modules` from the venv (as a GPU machine's Python lacks them), only from
    elsewhere: what scripts/gpu-check installs from the bundle's wheels, or the bundle's llama_cpp."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(f"""
import importlib.machinery, sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in {sorted(modules)!r} or path is not None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [p for p in sys.path if "site-packages" not in p])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)", name=name)
        return spec
sys.meta_path.insert(0, Hide())
""")
    python = tmp_path / "python3"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{hide}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def _checkout_bytes() -> int:
    """What a run call copies besides the carried paths: the checkout's tracked files."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    return sum((REPO / f.decode()).stat().st_size for f in files if f and (REPO / f.decode()).is_file())


def _part_bytes(part: Path) -> int:
    return sum(f.stat().st_size for f in part.iterdir())


@pytest.mark.slow
def test_gpu_check_rehearsed_from_its_bundle_on_lavapipe(tmp_path, vulkan_build):
    """The GPU check as a lent machine runs it: a bundle in parts of one call each, staged call by call (checked,
    idempotent), unpacked for a Python that lacks the worker's packages, run; here on Vulkan's lavapipe."""
    bundle = tmp_path / "bundle"
    env = {**os.environ, "PRESET": "vulkan", "PYTHON": sys.executable}
    subprocess.run([str(REPO / "scripts" / "gpu-bundle"), str(bundle)], env=env, check=True, timeout=3600)
    parts = sorted(bundle.glob("part*"))
    assert len(parts) >= 2 and all(_checkout_bytes() + _part_bytes(p) <= CALL_LIMIT for p in parts)
    python = _hiding_python(tmp_path, {"structlog", "gguf", "diskcache", "llama_cpp"})
    assert subprocess.run([str(python), "-c", "import structlog"], capture_output=True).returncode != 0
    check = [str(REPO / "scripts" / "gpu-check")]
    run_env = {**os.environ, **LAVAPIPE, "GPU_STAGE": str(tmp_path / "stage"), "PYTHON": str(python),
               "BACKEND": "vulkan", "OUT": str(tmp_path / "out"), "RUN_TIMEOUT": "3600", "PROBE_TIMEOUT": "60"}

    def gpu_check(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*check, *args], env=run_env, capture_output=True, text=True, timeout=4000, cwd=REPO)

    first = gpu_check("stage", str(parts[0]))
    assert first.returncode == 1 and "still missing" in first.stderr
    assert gpu_check("run").returncode == 1  # not before every part is there
    for part in parts[1:]:
        staged = gpu_check("stage", str(part))
    assert staged.returncode == 0 and "every part is staged" in staged.stderr
    assert "already staged" in gpu_check("stage", str(parts[0])).stderr
    damaged = tmp_path / "damaged"
    shutil.copytree(parts[-1], damaged)
    piece = next(p for p in damaged.iterdir() if p.name != "SHA256SUMS")
    piece.write_bytes(piece.read_bytes()[:-1] + b"\0")
    bad = subprocess.run([*check, "stage", str(damaged)], env={**run_env, "GPU_STAGE": str(tmp_path / "other")},
                         capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "does not match its sha256" in bad.stderr

    # Lavapipe decodes about a token a second, slower still with flash attention (fast mode): 240 s a step timed
    # out the 2-turn chat and fast mode's 8 streams once (1,100 s in all).
    done = gpu_check("run", "--quick", "--threads", "2", "--step-timeout", "900")
    assert "installed structlog" in done.stderr and "installed gguf" in done.stderr
    report = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    steps = {step["name"]: step for step in report["steps"]}
    for name in ("backends lists the device", "serve: every layer offloaded", "vram_bytes", "streamed chat"):
        assert steps[name]["ok"] is True, steps[name]
    assert "llvmpipe" in steps["backends lists the device"]["detail"]
    assert steps["load-time check"]["data"]["guarantee"]["guarantee"] == "measured"
    assert [p["server"] for p in report["perf"]] == ["llm-worker exact", "llm-worker fast", "llama-server"]
    assert all(p["error"] is None and p["decode_1"] > 0 and p["prefill_ms"] > 0 for p in report["perf"])
    assert "| check | result | detail |" in done.stdout and (tmp_path / "out" / "logs.tar.gz").stat().st_size > 0


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


@pytest.mark.slow
def test_cuda_bundle_fits_two_calls(tmp_path, cuda_build):
    bundle = tmp_path / "bundle"
    env = {**os.environ, "PYTHON": sys.executable, "CMAKE_ARGS": f"-DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCH}"}
    subprocess.run([str(REPO / "scripts" / "gpu-bundle"), str(bundle)], env=env, check=True, timeout=3600)
    parts = sorted(bundle.glob("part*"))
    assert len(parts) == 2 and all(_checkout_bytes() + _part_bytes(p) <= CALL_LIMIT for p in parts)
    listed = subprocess.run(["tar", "-tJf", str(parts[0] / "core.tar.xz")], capture_output=True, text=True,
                            check=True).stdout.split()
    names = {name.removeprefix("./") for name in listed}
    assert {"lib/libggml-cuda.so", "lib/llama-server", "lib/libllama.so", "lib/libgomp.so.1",
            "python/llama_cpp/llama_cpp.py", "wheels/MODULES"} <= names
    assert any(name.startswith("lib/libcudart.so.") for name in names)  # under the soname libggml-cuda needs


# --- slow: the cuda and vulkan Docker images ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not docker_available(), reason="no container engine answers here (docker info failed)")
@pytest.mark.parametrize("backend", ["cuda", "vulkan"])
def test_gpu_image_builds_and_lists_its_backend(backend):
    """Built without a GPU or a registry (LLM_WORKER_BASE_IMAGE: docker/base-image.sh's base; PIP_CERT: a re-signing
    proxy's CA, as for the cpu image); inside, llama.cpp has the backend and every library it needs resolves."""
    tag = build_image(backend, timeout=4 * 3600)

    def backends(*flags: str) -> str:
        return subprocess.run([DOCKER, "run", "--rm", *(f"--env={k}={v}" for k, v in LAVAPIPE.items()),
                               "--entrypoint", "llm-worker", tag, "backends", *flags],
                              capture_output=True, text=True, check=True, timeout=300).stdout

    info = json.loads(backends("--json"))
    assert backend in info["servable"]
    # Offload needs a device: lavapipe is in the vulkan image; the cuda image finds none on a machine without a
    # GPU (or without --gpus), and says so rather than "rebuild".
    assert info["gpu_offload"] is any(d["backend"] == backend for d in info["devices"])
    if not info["gpu_offload"]:
        assert f"the build has {backend} but found no device" in backends()
    unresolved = subprocess.run(
        [DOCKER, "run", "--rm", "--entrypoint", "sh", tag, "-c", "ldd /opt/llm-worker/lib/python3*/site-packages/"
         "llama_cpp/lib/*.so | grep 'not found' || true"], capture_output=True, text=True, check=True).stdout
    assert not unresolved.strip(), unresolved
    if backend == "vulkan":  # mesa-vulkan-drivers is in the image: lavapipe is a device there too
        assert any(d["backend"] == "vulkan" and "llvmpipe" in d["description"] for d in info["devices"]), info
