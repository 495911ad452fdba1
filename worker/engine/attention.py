"""How attention runs: flash attention or not, and the type of the V cells, chosen so that exact mode is exact.

llama.cpp's CPU flash attention (ggml-cpu/ops.cpp) has three kernels, and their sums differ: split-KV for the
lone query row of one stream over 512+ cells, tiled from 64 query rows, and a per-row kernel between. Left to
pick by shape, a row's numerics would follow what else is in its batch. The tiled and split-KV kernels both need
K and V cells of one type (F16 or F32), so with V stored in another type than K every row takes the per-row
kernel, which computes each row alone over its cells in order: a row's logits no longer depend on the batch, nor
on whether its cells were made one token at a time or by a prefill (bench/probes/RESULTS.md, "flash attention
pinned"). BF16 V cells are the size of F16 ones, and that kernel sums them in F32.

So exact and off modes (which must compute alike: tests hold their texts equal) run flash attention on the cpu
backend with V cells in bf16, and without flash attention elsewhere (GPU kernels were not measured); fast mode
leaves flash attention to llama.cpp and keeps f16 cells, its fastest.
"""

from __future__ import annotations

from dataclasses import dataclass

from worker.engine.prefix_cache import CacheMode
from worker.errors import WorkerError

# The V type exact mode stores when K is f16: same size, and another type than K pins the per-row kernel.
PINNING_V_TYPE = "bf16"


@dataclass(frozen=True)
class Attention:
    flash_attn: str  # on | off | auto (llama.cpp decides)
    cache_type_v: str
    pinned: bool  # flash attention on, every row through its per-row kernel whatever the batch


def plan_attention(backend: str, rpc: bool, mode: CacheMode, flash_attn: str, cache_type_k: str,
                   cache_type_v: str | None) -> Attention:
    """The attention a context gets, from the flags (`cache_type_v` None: not given). Raises WorkerError for
    flags that would break exact mode's promise, naming what to change."""
    if mode is CacheMode.FAST:
        return Attention(flash_attn, cache_type_v or "f16", pinned=False)
    if backend != "cpu" or rpc:
        if flash_attn == "on":
            raise WorkerError(f"--prefix-cache {mode.value} with --flash-attn on needs the cpu backend without "
                              "--rpc: elsewhere flash attention picks its kernels by batch shape, unmeasured, so "
                              "text could follow the load; use --flash-attn auto, or --prefix-cache fast")
        return _unfused(cache_type_v)
    value_type = cache_type_v or (PINNING_V_TYPE if cache_type_k == "f16" else "f16")
    # llama.cpp's shape-picked kernels need K and V cells of one F16 (or F32) type; any other pair pins the per-row one.
    pinnable = not (cache_type_k == "f16" and value_type == "f16")
    if flash_attn == "on" and not pinnable:
        raise WorkerError(f"--prefix-cache {mode.value} with --flash-attn on needs --cache-type-v other than f16 "
                          "when --cache-type-k is f16: with both f16 llama.cpp picks its attention kernel by batch "
                          f"shape, so text would follow the load; leave --cache-type-v unset ({PINNING_V_TYPE}), "
                          "or use --prefix-cache fast")
    if flash_attn == "off" or not pinnable:
        return _unfused(cache_type_v)
    return Attention("on", value_type, pinned=True)


def _unfused(cache_type_v: str | None) -> Attention:
    """Exact or off mode without flash attention: every kernel then follows only the row (with F16 V cells)."""
    if cache_type_v not in (None, "f16"):
        raise WorkerError(f"--cache-type-v {cache_type_v} needs flash attention: use --flash-attn auto on the cpu "
                          "backend, or --prefix-cache fast with --flash-attn on")
    return Attention("off", "f16", pinned=False)
