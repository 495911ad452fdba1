"""GPU backends without a GPU or a worker: which promise about greedy text startup states on each backend and mode,
and what `llm-worker backends` says of a GPU build that found no device. The rest: tests/e2e/test_gpu_backends.py."""

from __future__ import annotations

import pytest

from worker.backends_report import render
from worker.engine.exactness.kv_plan import plan_attention
from worker.engine.modes import CacheMode
from worker.engine.native.backends import BuildInfo, Device
from worker.engine.native.device_faults import LAVAPIPE_FLASH_ATTN, device_attention
from worker.engine.startup.guarantee import guarantee
from worker.engine.startup.load_check import Numerics
from worker.worker_error import WorkerError


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
        # What holds by construction: prompts cut as their cold prefill cuts them (scheduler.chunk_grid).
        assert "does not depend on the prompt cache" in promise.holds


def test_backends_says_a_gpu_build_found_no_device():
    """A cuda build on a machine whose driver is missing lists the backend but no device: say that, not 'rebuild'."""
    info = BuildInfo(version="0.3.36", library_path="/x", backends=("cuda", "cpu"), devices=(), gpu_offload=False,
                     rpc=False, system_info="CUDA : ARCHS = 900 | CPU : AVX2 = 1")
    line = next(line for line in render(info).splitlines() if line.startswith("gpu offload"))
    assert "the build has cuda but found no device for it" in line and "rebuild" not in line


def test_backends_says_a_vulkan_build_without_a_driver_has_the_backend(tmp_path):
    """ggml-vulkan does not register where no Vulkan driver is installed (a Docker builder): its library is there."""
    (tmp_path / "libggml-vulkan.so").touch()
    (tmp_path / "libggml-cpu.so").touch()
    info = BuildInfo(version="0.3.36", library_path=str(tmp_path), backends=("cpu",), devices=(), gpu_offload=False,
                     rpc=False, system_info="CPU : AVX2 = 1")
    line = next(line for line in render(info).splitlines() if line.startswith("gpu offload"))
    assert "the build has vulkan but found no device" in line and "GGML_VK_VISIBLE_DEVICES" in line


LAVAPIPE = Device(0, "Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", "gpu", "vulkan", 2**33, 2**33)
H100 = Device(0, "Vulkan0", "NVIDIA H100 80GB HBM3", "gpu", "vulkan", 2**36, 2**36)


@pytest.mark.parametrize("flag", ["auto", "on"])
def test_lavapipe_runs_fast_mode_without_flash_attention_and_says_why(flag):
    """Mesa's lavapipe crashes in flash attention over one KV stream per slot (docs/backends.md, Vulkan): `auto`
    turns it off there and says why; `on` is refused with what to set. Other devices keep what was planned."""
    planned = plan_attention("vulkan", False, CacheMode.FAST, flag, None, None)
    assert device_attention(planned, H100, flag) == planned and planned.workaround is None
    if flag == "on":
        with pytest.raises(WorkerError, match="--flash-attn auto"):
            device_attention(planned, LAVAPIPE, flag)
        return
    ran = device_attention(planned, LAVAPIPE, flag)
    assert (ran.flash_attn, ran.workaround) == ("off", LAVAPIPE_FLASH_ATTN)
    assert (ran.cache_type_k, ran.cache_type_v) == (planned.cache_type_k, planned.cache_type_v)


def test_exact_mode_on_lavapipe_needs_no_workaround():
    planned = plan_attention("vulkan", False, CacheMode.EXACT, "auto", None, None)
    assert planned.flash_attn == "off" and device_attention(planned, LAVAPIPE, "auto") == planned
    assert device_attention(planned, None, "auto") == planned
