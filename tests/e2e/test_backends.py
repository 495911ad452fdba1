"""Build variants: `build-backend` hands each preset's flags to pip; `backends` describes this CPU build."""

import json

import pytest

from tests.e2e.test_cli import one_line_failure, run_cli
from tests.helpers import EXPECTED_CMAKE_ARGS


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
    assert ("other builds: llm-worker build-backend PRESET... "
            "(cpu, cpu-native, openblas, cuda, metal, vulkan, rpc)") in out


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
