"""Everything a KV cell's numerics depend on, as one fingerprint: cells saved under one load only under the same.
Loaded under other numerics, a saved cell is a wrong one that exact mode reuses as a prefill's and the text changes,
so each saved entry carries its maker's fingerprint (cell_file.py) and loads only where it equals the worker's."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from worker.engine.exactness.build_choice import loaded_build, loaded_library
from worker.user_cache import content_sha256

if TYPE_CHECKING:  # free of llama_cpp, as SchedulerStats' import of the disk cache's counters needs
    from worker.engine.native.model import LlamaModel

# llama.cpp's own shared libraries: libllama, and libggml with its backends (libggml-base, libggml-cpu, -cuda...).
LIBRARY_NAME = re.compile(r"lib(llama|ggml)[\w.-]*\.(so|dylib|dll)[\d.]*")
# GPU runtimes a backend computes through (driver, CUDA, cuBLAS, Vulkan, ROCm): too large to hash (cuBLASLt is
# ~500 MB), identified by path, size and time instead.
GPU_RUNTIME_NAME = re.compile(r"lib(cuda|cudart|cublas|cublasLt|nvidia|vulkan|amdhip|hipblas|rocblas)[\w.-]*\.so[\d.]*")
PROC_MAPS = Path("/proc/self/maps")
SHOWN = 16  # characters of a part's value a warning shows (hashes are 64)


@dataclass(frozen=True)
class Fingerprint:
    parts: tuple[tuple[str, str], ...]  # (name, value), sorted by name

    @classmethod
    def of(cls, parts: dict[str, str]) -> Fingerprint:
        return cls(tuple(sorted(parts.items())))

    def as_dict(self) -> dict[str, str]:
        return dict(self.parts)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.parts).encode()).hexdigest()

    def explain(self, saved: dict[str, str]) -> str:
        """How a saved entry's fingerprint differs from this one, part by part ("" where it does not): each
        part's name, its saved value and this worker's, long values (hashes) cut short."""
        mine = self.as_dict()
        return "; ".join(f"{name} {_short(saved.get(name))} here {_short(mine.get(name))}"
                         for name in sorted(mine.keys() | saved.keys()) if mine.get(name) != saved.get(name))


def _short(value: str | None) -> str:
    if value is None:
        return "(none)"
    return value if len(value) <= SHOWN else value[:SHOWN] + "…"


def engine_fingerprint(model: LlamaModel) -> Fingerprint:
    """The fingerprint of the loaded model's numerics: the model file's hash (read unless the source cache already
    names it by it: ~0.13 s per 100 MB here) and numerics_parts."""
    return Fingerprint.of({"model_sha256": content_sha256(model.path), **numerics_parts(model)})


def numerics_parts(model: LlamaModel) -> dict[str, str]:
    """What the loaded model's numerics depend on besides the model file: after the model is loaded (ggml's
    switches are set then). Its parts are generic rather than today's switches, so that a new switch, a patched
    build or a new cell type needs no change here: the libraries' bytes stand for the build, its compile flags and
    patches; GGML_* for ggml's run-time switches; libc for libm's functions in some kernels' scalar tails; the CPU
    for the code paths its instruction set picks; then the engine's own choices."""
    config, attention, kernels = model.config, model.attention, model.kernels
    return {
        "libraries_sha256": _files_digest(library_files()),
        "gpu_runtime": _gpu_runtime(),
        "ggml_env": ";".join(f"{name}={value}" for name, value in sorted(os.environ.items())
                             if name.startswith("GGML_")),
        "libc": " ".join(platform.libc_ver()),
        "cpu": _cpu(),
        "llama_cpp_python": version("llama-cpp-python"),
        "prefix_cache": config.prefix_cache.value,
        "cache_type_k": attention.cache_type_k,
        "cache_type_v": attention.cache_type_v,
        "flash_attn": attention.flash_attn,
        "n_ctx_seq": str(model.n_ctx_seq),
        # The libraries' bytes and ggml_env already tell builds and switches apart; these say which build loaded and
        # what its kernels took (a switch asked of a library without it is off), in words a skip's warning shows.
        "build": loaded_build(),
        "kernels": f"tiled_mm={kernels.tiled_mm} repack={kernels.repack} batch_invariant={kernels.batch_invariant}",
        "backend": f"{config.backend}:{config.device}",
        "rpc": ",".join(config.rpc_servers),
        "n_gpu_layers": str(config.n_gpu_layers),
        "threads": str(config.threads),
    }


def file_identity(path: Path) -> str:
    """A file as its path, size and modification time: replaced or rewritten, it is another file (read nothing)."""
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def library_files() -> list[Path]:
    """llama.cpp's shared libraries this process runs: those it mapped (Linux), else the loaded build's folder."""
    if PROC_MAPS.exists():
        return _mapped(LIBRARY_NAME)
    return sorted(path for path in Path(loaded_library()).iterdir() if LIBRARY_NAME.fullmatch(path.name))


def _gpu_runtime() -> str:
    """The GPU runtime libraries this process mapped, by path, size and time ("" on the cpu backend)."""
    return ";".join(file_identity(path) for path in (_mapped(GPU_RUNTIME_NAME) if PROC_MAPS.exists() else []))


def _mapped(name: re.Pattern[str]) -> list[Path]:
    mapped = {fields[5] for line in PROC_MAPS.read_text().splitlines() if len(fields := line.split(maxsplit=5)) == 6}
    return sorted(Path(path) for path in mapped if name.fullmatch(Path(path).name))


def _files_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _cpu() -> str:
    """The CPU's model and a digest of its feature flags (Linux), else what the platform says."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() + " " + platform.processor()
    fields = (line.split(":", 1) for line in info.split("\n\n")[0].splitlines() if ":" in line)
    first = {key.strip(): value.strip() for key, value in fields}  # the first processor's
    flags = first.get("flags", first.get("Features", ""))
    name = first.get("model name", first.get("CPU part", platform.machine()))
    return f"{name} flags:{hashlib.sha256(flags.encode()).hexdigest()[:16]}"
