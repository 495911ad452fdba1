"""Build presets: CMakePresets.json reaches CMAKE_ARGS intact, combined left to right; the reader needs only the
standard library."""

import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers import EXPECTED_CMAKE_ARGS
from worker.build_presets import load_presets, variant
from worker.worker_error import WorkerError


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
    (["openblas", "rpc"], ["-DGGML_NATIVE=OFF", "-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS", "-DGGML_RPC=ON"]),
])
def test_presets_combine_left_to_right(names, expected):
    assert variant(names).cmake_args() == expected


def test_unknown_preset_names_the_ones_there_are():
    with pytest.raises(WorkerError, match=r"unknown build preset 'rocm'; CMakePresets.json has: cpu, cpu-native"):
        variant(["rocm"])


def test_presets_reader_runs_without_the_worker_installed():
    """The shell scripts call it with a bare python3 and PYTHONPATH=repo: standard library only."""
    result = subprocess.run([sys.executable, "-S", "-m", "worker.build_presets", "--apt", "run", "openblas"],
                            capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.split() == ["libgomp1", "libopenblas0-pthread"]
    flags = subprocess.run([sys.executable, "-S", "-m", "worker.build_presets", "cpu", "rpc"],
                           capture_output=True, text=True, cwd=REPO, check=True)
    assert flags.stdout.strip() == "-DGGML_NATIVE=OFF -DGGML_RPC=ON"
