"""`llm-worker backends`: what the installed llama.cpp build can run on, for people or machines."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from worker.build_presets import load_presets
from worker.engine.host import (
    ASSISTING_BACKENDS,
    BATCH_INVARIANT_DIR,
    BuildInfo,
    batch_invariant_installed,
    build_origin,
)

GIB = 1024 ** 3
# libggml-*.so that are not a GPU backend.
NOT_GPU_LIBRARIES = {"base", "cpu", "blas", "rpc"}


def _yes_no(flag: bool, yes: str, no: str) -> str:
    return f"yes ({yes})" if flag else f"no ({no})"


def render(info: BuildInfo) -> str:
    rows = [
        ("llama.cpp", f"llama-cpp-python {info.version}, libraries in {info.library_path}"),
        ("built by", build_origin(info.library_path)),
        ("gpu offload", _yes_no(info.gpu_offload,
                                "--n-gpu-layers defaults to all layers on a GPU backend or with --rpc",
                                _why_no_offload(info))),
        ("blas", _yes_no(info.blas, ASSISTING_BACKENDS["blas"], "rebuild with the openblas preset to add it")),
        ("rpc", _yes_no(info.rpc, "serve --rpc host:port[,host:port] spreads layers over ggml-rpc-server hosts",
                        "rebuild with the rpc preset to add it")),
        ("exact mode", _yes_no(batch_invariant_installed(), f"the batch-invariant build in {BATCH_INVARIANT_DIR}, "
                               "loaded on the cpu backend for every weight type", "the batch-invariant build is "
                               "missing: make install builds it; without it exact mode pins slower kernels and "
                               "F16/BF16/F32 weights lose exactness")),
        ("backends", ", ".join(info.backends)),
        ("--backend", ", ".join(info.servable)),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.append("devices:")
    for device in info.devices:
        free, total = device.memory_free / GIB, device.memory_total / GIB
        memory = f"{free:.1f} of {total:.1f} GiB free" if device.memory_total else ""
        lines.append(f"  {device.backend}:{device.name}  {device.kind}  {device.description}  {memory}".rstrip())
    lines.append(f"cpu features: {info.system_info.removeprefix('CPU : ').rstrip(' |')}")
    lines.append(f"other builds: llm-worker build-backend PRESET... ({', '.join(load_presets())})")
    return "\n".join(lines)


def _why_no_offload(info: BuildInfo) -> str:
    # A GPU build on a machine whose driver is missing or too old lists the backend with no device; ggml-vulkan
    # without any Vulkan driver does not even register, but its library is there.
    built = {path.name.split(".")[0].removeprefix("libggml-") for path in Path(info.library_path).glob("libggml-*.so")}
    built = {b for b in built - NOT_GPU_LIBRARIES if not b.startswith("cpu")}  # not libggml-cpu-haswell either
    if gpu := sorted({b for b in info.servable if b != "cpu"} | built):
        software = ("; ggml-vulkan skips a software device (lavapipe) unless GGML_VK_VISIBLE_DEVICES names it"
                    if "vulkan" in gpu else "")
        return (f"the build has {', '.join(gpu)} but found no device for it: check the GPU driver "
                f"(nvidia-smi, vulkaninfo) against the toolkit the build used{software}")
    return "layers stay on the CPU; rebuild with a GPU preset to offload"


def as_json(info: BuildInfo) -> str:
    data = dataclasses.asdict(info)
    data.update(servable=list(info.servable), blas=info.blas, built_by=build_origin(info.library_path),
                batch_invariant=str(BATCH_INVARIANT_DIR) if batch_invariant_installed() else None)
    return json.dumps(data, indent=2)
