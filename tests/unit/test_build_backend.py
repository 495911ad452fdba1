"""`llm-worker build-backend` and the script behind it: from a checkout, make install's one compile with our patches;
from a wheel, pip's compile with the presets' flags. scripts/install-llama-cpp-libs run against stand-ins for the
compile and for pip: what it hands pip, and what it leaves in llama_cpp/lib."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import EXPECTED_CMAKE_ARGS
from worker import build_backend
from worker.build_presets import variant
from worker.engine.exactness.build_choice import build_origin


def test_from_a_checkout_it_runs_make_installs_script_with_the_patches():
    command = build_backend.build_command(variant(("cpu", "rpc")))
    assert command.argv == (str(REPO / "scripts" / "install-llama-cpp-libs"), "cpu,rpc", sys.prefix)
    assert command.env_changes == {"LLAMA_CPP_PATCHES": str(REPO / "patches" / "llama.cpp")}
    assert command.cmake_args == "-DGGML_NATIVE=OFF -DGGML_RPC=ON"


def test_the_users_cmake_args_reach_the_script():
    command = build_backend.build_command(variant(("cuda",)), extra_cmake_args="-DCMAKE_CUDA_ARCHITECTURES=89")
    assert command.env["CMAKE_ARGS"] == "-DCMAKE_CUDA_ARCHITECTURES=89"
    assert command.shell().startswith(f"LLAMA_CPP_PATCHES={REPO}/patches/llama.cpp "
                                      "CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=89 ")


@pytest.mark.parametrize("preset", sorted(EXPECTED_CMAKE_ARGS))
def test_without_a_checkout_pip_compiles_with_the_preset_flags_and_bypasses_the_wheel_cache(preset, monkeypatch):
    monkeypatch.setattr(build_backend, "SCRIPT", REPO / "no-such-script")
    command = build_backend.build_command(variant((preset,)))
    flags = " ".join(EXPECTED_CMAKE_ARGS[preset])
    assert command.env_changes == {"CMAKE_ARGS": flags}
    for arg in ("-m pip install", "--no-cache-dir", "--force-reinstall", "--no-binary llama-cpp-python",
                "llama-cpp-python==0.3.36"):
        assert arg in command.shell()


def test_pip_gets_the_users_cmake_args_last():
    command = build_backend.pip_build(variant(("cuda",)), extra_cmake_args="-DCMAKE_CUDA_ARCHITECTURES=89")
    assert command.env_changes["CMAKE_ARGS"] == "-DGGML_NATIVE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=89"


def fake_install(tmp_path: Path, cache: Path, old_libraries: list[str], installed: str = "") -> tuple[Path, str]:
    """scripts/install-llama-cpp-libs in a copy of the checkout whose build-llama-cpp makes two libraries and a
    record, into a venv whose pip records its call ("" where none was made), whose llama_cpp/lib holds
    OLD_LIBRARIES and which has llama-cpp-python `installed` at that version ("": none)."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    script = checkout / "scripts" / "install-llama-cpp-libs"
    script.write_bytes((REPO / "scripts" / "install-llama-cpp-libs").read_bytes())
    script.chmod(0o755)
    (checkout / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    built = tmp_path / "built"
    built.mkdir()
    stand_in = checkout / "scripts" / "build-llama-cpp"
    stand_in.write_text(f'#!/bin/sh\nfor f in libllama.so libggml-cpu.so; do echo "$1" > {built}/$f; done\n'
                        f'printf "presets=$1\\npatches=0123abcd\\nflags=-DGGML_NATIVE=ON\\n" '
                        f'> {built}/llm-worker-build\n'
                        f'echo {built}\n')
    stand_in.chmod(0o755)
    lib = tmp_path / "site" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    for name in old_libraries:
        (lib / name).write_text("old")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    pip_call = tmp_path / "pip-call"
    (venv / "bin" / "pip").write_text(f'#!/bin/sh\necho "CMAKE_ARGS=$CMAKE_ARGS $*" > {pip_call}\n')
    version = f"echo {installed}" if installed else "exit 1"
    (venv / "bin" / "python").write_text(f'#!/bin/sh\ncase "$2" in *metadata*) {version};; *) echo {lib};; esac\n')
    for tool in ("pip", "python"):
        (venv / "bin" / tool).chmod(0o755)
    env = {**os.environ, "LLM_WORKER_BUILD_CACHE": str(cache)}
    run = subprocess.run([str(script), "cpu-native", str(venv)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == str(lib)
    return lib, pip_call.read_text() if pip_call.exists() else ""


def test_the_script_installs_llama_cpp_pythons_python_side_alone_from_the_cached_sdist(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    sdist = cache / "llama_cpp_python-0.3.36.tar.gz"
    sdist.write_text("")
    _, pip = fake_install(tmp_path, cache, [])
    assert pip.startswith("CMAKE_ARGS=-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF install ")
    assert "--no-binary llama-cpp-python" in pip and "--no-cache-dir" in pip
    assert pip.split()[-1] == str(sdist)


def test_the_script_asks_the_index_without_a_cached_sdist(tmp_path):
    _, pip = fake_install(tmp_path, tmp_path / "empty-cache", [])
    assert pip.split()[-1] == "llama-cpp-python==0.3.36"


def test_the_python_side_at_the_pinned_version_stays_and_only_the_libraries_change(tmp_path):
    """make install's second call and a rebuild for another preset: pip is not asked again."""
    lib, pip = fake_install(tmp_path, tmp_path / "cache", ["libllama.so"], installed="0.3.36")
    assert pip == "" and (lib / "libllama.so").read_text().strip() == "cpu-native"
    _, pip = fake_install(tmp_path / "older", tmp_path / "cache", [], installed="0.3.35")
    assert pip.split()[-1] == "llama-cpp-python==0.3.36"


def test_the_build_replaces_what_llama_cpp_lib_held_and_says_what_it_is(tmp_path):
    lib, _ = fake_install(tmp_path, tmp_path / "cache", ["libllama.so", "libggml-cuda.so"])
    # A GPU build's library left beside a CPU build would be reported as a backend the build lacks.
    assert sorted(p.name for p in lib.iterdir()) == ["libggml-cpu.so", "libllama.so", "llm-worker-build"]
    assert (lib / "libllama.so").read_text().strip() == "cpu-native"
    assert build_origin(lib) == "scripts/build-llama-cpp, preset cpu-native, our patches (set 0123abcd)"


def test_a_build_without_the_record_is_llama_cpp_pythons_own(tmp_path):
    assert build_origin(tmp_path) == "llama-cpp-python's own compile (pip install), without our patches"
    (tmp_path / "llm-worker-build").write_text("presets=cuda\npatches=\nflags=-DGGML_CUDA=ON\n")
    assert build_origin(tmp_path) == "scripts/build-llama-cpp, preset cuda, no patches"
