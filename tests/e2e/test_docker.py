"""The Docker images, slow: build the cpu, openblas and vulkan images and serve from each; the images' build step
outside Docker."""

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import REPO, free_port
from tests.docker_helpers import DOCKER, build_image, docker_available
from tests.helpers import openai_once, openai_stream


# Each image serving: what `llm-worker backends` lists, and the guarantee exact mode says it holds at startup
# (docs/cache-and-exactness.md, "On a GPU": bitwise on the CPU, measured on a GPU backend). The vulkan image runs on
# lavapipe, Mesa's software device in the image, with no /dev/dri from the host; ggml-vulkan leaves a CPU-type
# device out unless named (GGML_VK_VISIBLE_DEVICES). The cuda image is built in tests/e2e/test_gpu_backends.py.
@dataclass(frozen=True)
class Image:
    backend: str  # listed by `llm-worker backends` inside, and where the model's weights go
    guarantee: str
    blas: bool = False  # OpenBLAS in ggml's CPU backend
    env: tuple[tuple[str, str], ...] = ()


IMAGES = {"cpu": Image("cpu", "bitwise"), "openblas": Image("cpu", "bitwise", blas=True),
          "vulkan": Image("vulkan", "measured", env=(("GGML_VK_VISIBLE_DEVICES", "0"),))}


def wait_healthy_container(container: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        state = json.loads(subprocess.run([DOCKER, "inspect", container], capture_output=True, text=True,
                                          check=True).stdout)[0]["State"]
        if state["Health"]["Status"] == "healthy":
            return
        logs = subprocess.run([DOCKER, "logs", container], capture_output=True, text=True).stderr
        assert state["Running"] and time.monotonic() < deadline, logs[-3000:]
        time.sleep(2)


@pytest.mark.slow
@pytest.mark.skipif(not docker_available(), reason="no container engine answers here (docker info failed)")
@pytest.mark.parametrize("name", list(IMAGES))
async def test_image_builds_and_serves(name, model_path, tmp_path):
    image = IMAGES[name]
    tag = build_image(name)
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(model_path, models / "model.gguf")
    (models / "model.gguf").chmod(0o644)  # the image's user is uid 10001
    models.chmod(0o777)  # and writes its cache there
    port = free_port()
    container = subprocess.run(
        [DOCKER, "run", "-d", "-p", f"127.0.0.1:{port}:8080", "-v", f"{models}:/models",
         *(f"--env={key}={value}" for key, value in image.env), tag,
         "--model", "/models/model.gguf", "--parallel", "1", "--ctx-size", "1024"],
        capture_output=True, text=True, check=True).stdout.strip()
    try:
        wait_healthy_container(container, 300)
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
            chat = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 8,
                    "temperature": 0}
            streamed = await openai_stream(http, url + "/v1/chat/completions", chat)
            answered = await openai_once(http, url + "/v1/chat/completions", chat)
            once = await openai_once(http, url + "/v1/completions", {
                "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0})
            health = await (await http.get(url + "/health")).json()
        # Streamed token by token over SSE, and the same text as the answer in one piece (exact mode).
        assert len(streamed.pieces) > 3 and streamed.finish_reason in ("stop", "length"), streamed.events
        assert streamed.text == answered["choices"][0]["message"]["content"], (streamed.text, answered)
        assert once["choices"][0]["text"].startswith(" Paris"), once
        # The weights on the backend's device: lavapipe's memory in the vulkan image, none in the CPU images.
        assert (health["vram_bytes"] > 0) is (image.backend != "cpu"), health
        logs = subprocess.run([DOCKER, "logs", container], capture_output=True, text=True)
        lines = (logs.stdout + logs.stderr).splitlines()
        said = [json.loads(line) for line in lines if '"exactness_guarantee"' in line]
        assert [line["guarantee"] for line in said] == [image.guarantee], said
        user = subprocess.run([DOCKER, "exec", container, "id", "-u"], capture_output=True, text=True).stdout
        assert user.strip() == "10001"
        info = json.loads(subprocess.run([DOCKER, "exec", container, "llm-worker", "backends", "--json"],
                                         capture_output=True, text=True, check=True).stdout)
        assert image.backend in info["backends"] and info["blas"] is image.blas, info
        # llama.cpp compiled once, by our script (with our patches in the CPU images), no pip compile beside it.
        assert info["built_by"].startswith(f"scripts/build-llama-cpp, preset {name}, "), info["built_by"]
        assert ("our patches" in info["built_by"]) is (image.guarantee == "bitwise"), info["built_by"]
        if image.guarantee == "bitwise":
            # Exact mode's batch-invariant build is in the image, and loads there (without the builder's cache).
            assert info["batch_invariant"] == "/opt/llm-worker/lib/llm-worker/batch-invariant"
            loads = subprocess.run([DOCKER, "exec", "-e", f"LLAMA_CPP_LIB_PATH={info['batch_invariant']}",
                                    container, "python3", "-c",
                                    "import llama_cpp; print(llama_cpp.llama_cpp._base_path)"],
                                   capture_output=True, text=True)
            assert loads.stdout.strip() == info["batch_invariant"], loads.stderr
        else:  # the GPU backend's device is Mesa's, inside the image
            assert any(d["backend"] == image.backend and "llvmpipe" in d["description"] for d in info["devices"])
    finally:
        subprocess.run([DOCKER, "rm", "--force", container], capture_output=True)


@pytest.mark.slow
def test_build_venv_script_outside_docker(tmp_path):
    """The images' build step, run as CI runs it: the portable cpu preset into a fresh venv."""
    venv = tmp_path / "venv"
    subprocess.run([str(REPO / "scripts" / "build-venv"), "cpu", str(venv)], check=True, timeout=3600)
    info = json.loads(subprocess.run([str(venv / "bin" / "llm-worker"), "backends", "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["backends"] == ["cpu"]
    # One compile, with our patches, for fast mode's library and exact mode's copy of it.
    assert info["built_by"].startswith("scripts/build-llama-cpp, preset cpu, our patches (set "), info["built_by"]
    assert info["batch_invariant"] == str(venv / "lib" / "llm-worker" / "batch-invariant")
    # GGML_NATIVE=OFF: ggml's portable build, not tuned to the build machine's newest extensions.
    # A CPU without any of them would build the same either way: there the check cannot fail.
    native_only = beyond_portable_extensions()
    if not native_only:
        pytest.skip("this CPU has no extension beyond the portable build's; portable and native builds look alike")
    for name in native_only:
        assert f"{name} = 1" not in info["system_info"], name


# /proc/cpuinfo flag -> ggml's system_info name, for the extensions a portable x86 build leaves off.
_NATIVE_ONLY = {"avx512f": "AVX512", "avx512vbmi": "AVX512_VBMI", "avx512_vnni": "AVX512_VNNI",
                "avx512_bf16": "AVX512_BF16", "avx_vnni": "AVX_VNNI", "amx_int8": "AMX_INT8"}


def beyond_portable_extensions() -> list[str]:
    """The extensions this machine has that a native build would enable and a portable one must not."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        return []
    flags = {flag for line in cpuinfo.read_text().splitlines() if line.startswith("flags")
             for flag in line.split(":", 1)[1].split()}
    return [name for flag, name in _NATIVE_ONLY.items() if flag in flags]
