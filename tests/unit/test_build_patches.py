"""scripts/build-llama-cpp with LLAMA_CPP_PATCHES, on a stand-in llama.cpp (one source file and a CMakeLists.txt
with one empty target) so that it runs in seconds: patches that change the same lines one after another build
twice from the same cache, a patch that does not apply stops the build in one line and leaves no half-patched
source behind, and another patch set builds apart."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-llama-cpp"
VERSION = "0.0.0"
SOURCE = "int step = 1;\n"
CMAKE = "cmake_minimum_required(VERSION 3.14)\nproject(standin NONE)\nadd_custom_target(noop)\n"


def _patch(name: str, before: str, after: str) -> str:
    return (f"From: test\nSubject: [PATCH] {name}\n\n---\n"
            f"--- a/src/step.c\n+++ b/src/step.c\n@@ -1 +1 @@\n-{before}+{after}")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A build cache and a stand-in sdist of llama-cpp-python VERSION."""
    root = tmp_path / "sdist" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    (root / "src").mkdir(parents=True)
    (root / "src" / "step.c").write_text(SOURCE)
    (root / "CMakeLists.txt").write_text(CMAKE)
    with tarfile.open(tmp_path / "sdist.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "sdist" / f"llama_cpp_python-{VERSION}", arcname=f"llama_cpp_python-{VERSION}")
    return tmp_path / "cache"


def _build(cache: Path, patches: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "LLAMA_CPP_PYTHON_VERSION": VERSION,
           "LLAMA_CPP_PYTHON_SDIST": str(cache.parent / "sdist.tar.gz"), "LLM_WORKER_BUILD_CACHE": str(cache),
           "LLAMA_CPP_PATCHES": str(patches)}
    return subprocess.run([str(SCRIPT), "cpu-native", "noop"], env=env, capture_output=True, text=True, timeout=300)


def _patched_sources(cache: Path) -> list[Path]:
    return sorted(cache.glob("build-*-src*"))


def test_patches_that_change_the_same_lines_build_again_from_the_cache(cache, tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-two.patch").write_text(_patch("two", SOURCE, "int step = 2;\n"))
    (patches / "0002-three.patch").write_text(_patch("three", "int step = 2;\n", "int step = 3;\n"))
    for _ in range(2):  # the second run finds the patched copy (where 0001 applies neither way)
        run = _build(cache, patches)
        assert run.returncode == 0, run.stderr[-2000:]
    [source] = _patched_sources(cache)
    assert (source / "src" / "step.c").read_text() == "int step = 3;\n"
    assert run.stdout.strip().splitlines()[-1] == str(source).removesuffix("-src") + "/bin"
    # Its record, copied with the libraries: the preset and the patch set (the hash in the build's name).
    record = (Path(str(source).removesuffix("-src")) / "bin" / "llm-worker-build").read_text().splitlines()
    assert record[:2] == ["presets=cpu-native", f"patches={str(source).removesuffix('-src').rsplit('-', 1)[1]}"]
    assert record[2].startswith("flags=-DGGML_NATIVE=ON")
    vendored = cache / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp" / "src" / "step.c"
    assert vendored.read_text() == SOURCE  # never patched in place

    (patches / "0002-three.patch").write_text(_patch("three, explained better", "int step = 2;\n", "int step = 3;\n"))
    assert _build(cache, patches).returncode == 0
    assert _patched_sources(cache) == [source]  # a corrected explanation changes no source: nothing built again

    (patches / "0002-three.patch").write_text(_patch("four", "int step = 2;\n", "int step = 4;\n"))
    assert _build(cache, patches).returncode == 0
    assert len(_patched_sources(cache)) == 2  # another set, another source and build


def test_a_patch_that_does_not_apply_stops_the_build_in_one_line(cache, tmp_path):
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "0001-two.patch").write_text(_patch("two", SOURCE, "int step = 2;\n"))
    (patches / "0002-stale.patch").write_text(_patch("stale", "int step = 7;\n", "int step = 8;\n"))
    run = _build(cache, patches)
    assert run.returncode == 1
    [line] = [line for line in run.stderr.splitlines() if line.startswith("build-llama-cpp:")]
    assert "0002-stale.patch does not apply" in line and "regenerate it" in line
    assert _patched_sources(cache) == []  # nothing half-patched left to build from later
