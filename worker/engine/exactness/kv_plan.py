"""How attention runs: flash attention or not, and the types of the K and V cells, chosen so that exact mode is exact.
llama.cpp's CPU flash attention picks one of three kernels by batch shape (split-KV, tiled, per-row), whose sums
differ: exact mode holds every row to one of them (docs/cache-and-exactness.md, "Prefix cache")."""

from __future__ import annotations

from dataclasses import dataclass

from worker.engine.config import EngineConfig
from worker.engine.modes import CacheMode
from worker.worker_error import WorkerError

# The cells exact mode stores on the cpu backend when not told. On the batch-invariant build (build_choice.py,
# patches/llama.cpp 0001, 0002, 0005) every row takes the tiled kernel's arithmetic, never split-KV: f16 is its
# type, as fast as llama.cpp's own picks; any other pair takes the per-row kernel for every row, also exact.
INVARIANT_K_TYPE = INVARIANT_V_TYPE = "f16"
# Without that build (the fallback) the shape-picked kernels need K in F16 (or F32) and V of the same type, so any
# other pair holds every row to the per-row kernel: K q8_0 with V f16 costs least, and K f16 takes V bf16
# (bench/probes/RESULTS.md, "Flash attention pinned" and "Which K and V types pin cheapest").
PINNED_K_TYPE, PINNED_V_TYPE, PINNING_V_TYPE = "q8_0", "f16", "bf16"
# q8_0 packs 32 values a block: a model whose attention heads are not a multiple of that wide cannot store it, and
# the fallback then keeps K in f16 with V in bf16 (the other pinned pair, slower to decode: bench/probes/RESULTS.md,
# "What the pinned kernel costs").
Q8_0_BLOCK = 32


@dataclass(frozen=True)
class Attention:
    flash_attn: str  # on | off | auto (llama.cpp decides)
    cache_type_k: str
    cache_type_v: str
    pinned: bool  # flash attention on, every row through one kernel whatever the batch
    workaround: str | None = None  # why the device runs it otherwise than planned (native/device_faults.py)


def config_attention(config: EngineConfig, head_size: int | None = None, batch_invariant: bool = False) -> Attention:
    """Flash attention and the KV cells' types for a config's mode and backend, and whether ggml's batch-invariant
    switch is on (WorkerError for flags that clash)."""
    return plan_attention(config.backend, bool(config.rpc_servers), config.prefix_cache, config.flash_attn,
                          config.cache_type_k, config.cache_type_v, head_size, batch_invariant)


def plan_attention(backend: str, rpc: bool, mode: CacheMode, flash_attn: str, cache_type_k: str | None,
                   cache_type_v: str | None, head_size: int | None = None, batch_invariant: bool = False) -> Attention:
    """The attention a context gets, from the flags (a cell type None: not given), once the model is loaded its K
    head size, and whether ggml's batch-invariant switch is on. Exact and off modes compute alike (tests hold their
    texts equal): pinned flash attention on the cpu backend, none elsewhere (GPU kernels are not held to one per
    row); fast mode leaves flash attention to llama.cpp with f16 cells, its fastest. Raises WorkerError for flags
    that would break exact mode's promise, naming what to change."""
    if mode is CacheMode.FAST:
        return Attention(flash_attn, cache_type_k or "f16", cache_type_v or "f16", pinned=False)
    if backend != "cpu" or rpc:
        if flash_attn == "on":
            raise WorkerError(f"--prefix-cache {mode.value} with --flash-attn on needs the cpu backend without "
                              "--rpc: elsewhere flash attention picks its kernels by batch shape, unmeasured, so "
                              "text could follow the load; use --flash-attn auto, or --prefix-cache fast")
        return _unfused(cache_type_k, cache_type_v)
    if flash_attn == "off":
        return _unfused(cache_type_k, cache_type_v)
    if batch_invariant:
        return Attention("on", cache_type_k or INVARIANT_K_TYPE, cache_type_v or INVARIANT_V_TYPE, pinned=True)
    fits_q8_0 = head_size is None or head_size % Q8_0_BLOCK == 0
    key_type = cache_type_k or (PINNED_K_TYPE if fits_q8_0 else "f16")
    value_type = cache_type_v or (PINNING_V_TYPE if key_type == "f16" else PINNED_V_TYPE)
    # llama.cpp's shape-picked kernels need K and V cells of one F16 (or F32) type; any other pair pins the per-row one.
    pinnable = not (key_type == "f16" and value_type == "f16")
    if flash_attn == "on" and not pinnable:
        raise WorkerError(f"--prefix-cache {mode.value} with --flash-attn on needs --cache-type-v other than f16 "
                          "when --cache-type-k is f16: with both f16 llama.cpp picks its attention kernel by batch "
                          f"shape, so text would follow the load; leave --cache-type-v unset ({PINNING_V_TYPE}), "
                          "install the batch-invariant build (make install), or use --prefix-cache fast")
    if not pinnable:
        return _unfused(key_type, value_type)
    return Attention("on", key_type, value_type, pinned=True)


def _unfused(cache_type_k: str | None, cache_type_v: str | None) -> Attention:
    """Exact or off mode without flash attention: every kernel then follows only the row (with F16 V cells)."""
    if cache_type_v not in (None, "f16"):
        raise WorkerError(f"--cache-type-v {cache_type_v} needs flash attention: use --flash-attn auto on the cpu "
                          "backend, or --prefix-cache fast with --flash-attn on")
    return Attention("off", cache_type_k or "f16", "f16", pinned=False)
