"""Build variants: `build-backend` runs make install's build for a preset; `backends` describes this CPU build."""

import json
import sys

from tests.conftest import REPO
from tests.e2e.test_cli import one_line_failure, run_cli


def test_build_backend_runs_make_installs_build_with_the_users_cmake_args():
    # From this checkout: scripts/install-llama-cpp-libs with our patches (tests/unit/test_build_backend.py).
    result = run_cli("build-backend", "cuda", "--dry-run", env={"CMAKE_ARGS": "-DCMAKE_CUDA_ARCHITECTURES=89"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (f"LLAMA_CPP_PATCHES={REPO}/patches/llama.cpp "
                                     "CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=89 "
                                     f"{REPO}/scripts/install-llama-cpp-libs cuda {sys.prefix}")


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
    # make install compiled llama.cpp once, with our patches, and no pip compile beside it.
    assert rows["built by"].startswith("scripts/build-llama-cpp, preset cpu-native, our patches (set "), rows
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
    assert info["built_by"] == run_cli("backends").stdout.split("built by", 1)[1].splitlines()[0].strip()


def test_rpc_on_a_build_without_rpc_is_one_line():
    line = one_line_failure(run_cli("serve", "--port", "0", "--rpc", "127.0.0.1:50052"))
    assert "--rpc needs llama.cpp built with RPC, and this build has only: cpu" in line
    assert "llm-worker build-backend cpu rpc" in line


def test_rpc_endpoints_must_be_host_port():
    result = run_cli("serve", "--port", "0", "--rpc", "127.0.0.1:50052,nocolon")
    assert result.returncode == 2 and "'nocolon' is not host:port" in result.stderr
