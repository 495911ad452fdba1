"""Build variants: CMakePresets.json reaches CMAKE_ARGS intact; `backends` describes this CPU build."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.test_cli import one_line_failure, run_cli
from worker.errors import WorkerError
from worker.presets import load_presets, variant

# What each preset must hand to CMake, inheritance resolved, in order.
EXPECTED_CMAKE_ARGS = {
    "cpu": ["-DGGML_NATIVE=OFF"],
    "cpu-native": ["-DGGML_NATIVE=ON"],
    "openblas": ["-DGGML_NATIVE=OFF", "-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"],
    "cuda": ["-DGGML_NATIVE=OFF", "-DGGML_CUDA=ON"],
    "metal": ["-DGGML_METAL=ON", "-DGGML_METAL_EMBED_LIBRARY=ON"],
    "vulkan": ["-DGGML_NATIVE=OFF", "-DGGML_VULKAN=ON"],
    "rpc": ["-DGGML_RPC=ON"],
    "no-llamafile": ["-DGGML_LLAMAFILE=OFF"],
}


def test_presets_file_declares_every_variant_with_its_flags():
    presets = load_presets()
    assert {name: p.cmake_args() for name, p in presets.items()} == EXPECTED_CMAKE_ARGS
    assert all(p.description for p in presets.values())


def test_the_package_ships_the_same_presets_file():
    assert (REPO / "worker" / "CMakePresets.json").read_text() == (REPO / "CMakePresets.json").read_text()


@pytest.mark.parametrize("names,expected", [
    (["cuda", "rpc"], ["-DGGML_NATIVE=OFF", "-DGGML_CUDA=ON", "-DGGML_RPC=ON"]),
    (["cpu-native", "rpc"], ["-DGGML_NATIVE=ON", "-DGGML_RPC=ON"]),
    (["cpu", "cpu-native"], ["-DGGML_NATIVE=ON"]),  # a later preset wins
    (["cpu-native", "no-llamafile"], ["-DGGML_NATIVE=ON", "-DGGML_LLAMAFILE=OFF"]),
])
def test_presets_combine_left_to_right(names, expected):
    assert variant(names).cmake_args() == expected


def test_unknown_preset_names_the_ones_there_are():
    with pytest.raises(WorkerError, match="unknown build preset 'rocm'; CMakePresets.json has: cpu, cpu-native"):
        variant(["rocm"])


@pytest.mark.parametrize("preset", sorted(EXPECTED_CMAKE_ARGS))
def test_build_backend_passes_the_preset_flags_and_bypasses_the_wheel_cache(preset):
    result = run_cli("build-backend", preset, "--dry-run")
    assert result.returncode == 0, result.stderr
    command = result.stdout.strip()
    flags = " ".join(EXPECTED_CMAKE_ARGS[preset])
    assert command.startswith(f"CMAKE_ARGS={flags} " if " " not in flags else f"CMAKE_ARGS='{flags}' ")
    for arg in ("-m pip install", "--no-cache-dir", "--force-reinstall", "--no-binary llama-cpp-python",
                "llama-cpp-python==0.3.36"):
        assert arg in command


def test_build_backend_appends_the_users_cmake_args():
    result = run_cli("build-backend", "cuda", "--dry-run", env={"CMAKE_ARGS": "-DCMAKE_CUDA_ARCHITECTURES=89"})
    assert result.stdout.startswith("CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=89' ")


def test_build_backend_refuses_an_unknown_preset():
    line = one_line_failure(run_cli("build-backend", "rocm"))
    assert "unknown build preset 'rocm'" in line and "cuda" in line


def test_presets_reader_runs_without_the_worker_installed():
    """The shell scripts call it with a bare python3 and PYTHONPATH=repo: standard library only."""
    result = subprocess.run([sys.executable, "-S", "-m", "worker.presets", "--apt", "run", "openblas"],
                            capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.split() == ["libgomp1", "libopenblas0-pthread"]
    flags = subprocess.run([sys.executable, "-S", "-m", "worker.presets", "cpu", "rpc"],
                           capture_output=True, text=True, cwd=REPO, check=True)
    assert flags.stdout.strip() == "-DGGML_NATIVE=OFF -DGGML_RPC=ON"


def test_backends_describes_this_cpu_build():
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in run_cli("backends").stdout.splitlines()
            if "  " in line and not line.startswith(" ")}
    assert rows["backends"] == "cpu" and rows["--backend"] == "cpu"
    assert rows["gpu offload"].startswith("no (layers stay on the CPU")
    assert rows["rpc"].startswith("no (") and rows["blas"].startswith("no (")
    assert rows["exact mode"].startswith("yes (the batch-invariant build in ")  # make install built it
    out = run_cli("backends").stdout
    assert "\n  cpu:CPU  cpu  " in out  # the CPU device, with its description and memory
    assert "cpu features: " in out and "OPENMP = 1" in out
    assert "other builds: llm-worker build-backend PRESET... (cpu, cpu-native, openblas, cuda, metal, vulkan, rpc, no-llamafile)" in out


def test_backends_json():
    info = json.loads(run_cli("backends", "--json").stdout)
    assert info["backends"] == ["cpu"] and info["servable"] == ["cpu"]
    assert info["gpu_offload"] is False and info["rpc"] is False and info["blas"] is False
    assert [(d["backend"], d["kind"]) for d in info["devices"]] == [("cpu", "cpu")]
    assert info["devices"][0]["memory_total"] > 0
    assert info["batch_invariant"].endswith("lib/llm-worker/batch-invariant")


def test_rpc_on_a_build_without_rpc_is_one_line():
    line = one_line_failure(run_cli("serve", "--port", "0", "--rpc", "127.0.0.1:50052"))
    assert "--rpc needs llama.cpp built with RPC, and this build has only: cpu" in line
    assert "llm-worker build-backend cpu rpc" in line


def test_rpc_endpoints_must_be_host_port():
    result = run_cli("serve", "--port", "0", "--rpc", "127.0.0.1:50052,nocolon")
    assert result.returncode == 2 and "'nocolon' is not host:port" in result.stderr
