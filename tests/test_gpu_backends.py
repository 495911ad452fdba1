"""GPU backends that run: the guarantee said at startup; slow: Vulkan on Mesa's lavapipe, CUDA compiled for one
architecture, the GPU check rehearsed from its bundle, and the cuda and vulkan Docker images.

The slow tests compile llama.cpp (scripts/build-llama-cpp, cached after the first run) and point llama-cpp-python at
those libraries with LLAMA_CPP_LIB_PATH, as tests/test_rpc.py does. Vulkan needs `scripts/install-system-deps build
vulkan` (libvulkan-dev, glslc, spirv-headers; mesa-vulkan-drivers gives lavapipe), CUDA an nvcc (scripts/cuda-cmake-args
brings cuBLAS when the toolkit lacks it).
"""

from __future__ import annotations

import json

import pytest

from worker.engine.exactness.guarantee import guarantee
from worker.engine.exactness.load_check import Numerics
from worker.engine.modes import CacheMode

@pytest.mark.parametrize(("mode", "numerics", "backend", "rpc", "expected"), [
    (CacheMode.FAST, Numerics(None, None), "cpu", False, "none"),
    (CacheMode.EXACT, Numerics(True, True, trusted=True), "cpu", False, "bitwise"),
    (CacheMode.OFF, Numerics(None, None), "cpu", False, "bitwise"),
    (CacheMode.EXACT, Numerics(True, False, trusted=True), "cpu", False, "cache-only"),
    (CacheMode.EXACT, Numerics(True, True), "vulkan", False, "measured"),
    (CacheMode.EXACT, Numerics(False, True), "cuda", False, "measured"),
    (CacheMode.EXACT, Numerics(True, True), "cpu", True, "measured"),
])
def test_the_guarantee_follows_backend_mode_and_measurement(mode, numerics, backend, rpc, expected):
    promise = guarantee(mode, numerics, backend, rpc)
    assert promise.name == expected
    assert promise.full == (expected == "bitwise")
    if expected == "measured":
        # The sentence says what was measured, never more.
        assert backend in promise.holds and f"batch_invariant={numerics.batch_invariant}" in promise.holds


def test_startup_says_which_guarantee_holds(worker):
    said = [json.loads(line) for line in worker.log().splitlines() if '"exactness_guarantee"' in line]
    assert [(line["guarantee"], line["level"]) for line in said] == [("bitwise", "info")], said
