"""What the installed llama.cpp build can run on, read from ggml's backend registry. The binding has no ggml device
API, so this calls libggml through ctypes the same way llama-cpp-python loads libllama."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import llama_cpp
from llama_cpp._ctypes_extensions import load_shared_library

from worker.worker_error import WorkerError

_DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}

# Compiled backends that --backend does not name: they help the others rather than hold a model.
ASSISTING_BACKENDS = {
    "blas": "BLAS matrix products for the cpu backend's prompt processing",
    "rpc": "remote devices on ggml-rpc-server processes, added with serve --rpc",
}


@dataclass(frozen=True)
class Device:
    index: int  # in ggml's global device list
    name: str
    description: str
    kind: str  # cpu | gpu | igpu | accel
    backend: str  # lower-case ggml backend name: cpu, cuda, metal, vulkan, blas, rpc...
    memory_free: int
    memory_total: int


@dataclass(frozen=True)
class BuildInfo:
    version: str  # llama-cpp-python's
    library_path: str  # where libllama and libggml were loaded from
    backends: tuple[str, ...]  # every compiled ggml backend
    devices: tuple[Device, ...]
    gpu_offload: bool
    rpc: bool
    system_info: str

    @property
    def servable(self) -> tuple[str, ...]:
        """What --backend accepts."""
        return tuple(b for b in self.backends if b not in ASSISTING_BACKENDS)

    @property
    def blas(self) -> bool:
        return "blas" in self.backends

    def devices_of(self, backend: str) -> list[Device]:
        return [d for d in self.devices if d.backend == backend]


@functools.cache
def ggml() -> ctypes.CDLL:
    lib = load_shared_library("ggml", llama_cpp.llama_cpp._base_path)
    p = ctypes.c_void_p
    signatures = {
        "ggml_backend_reg_count": ([], ctypes.c_size_t),
        "ggml_backend_reg_get": ([ctypes.c_size_t], p),
        "ggml_backend_reg_name": ([p], ctypes.c_char_p),
        "ggml_backend_dev_count": ([], ctypes.c_size_t),
        "ggml_backend_dev_get": ([ctypes.c_size_t], p),
        "ggml_backend_dev_name": ([p], ctypes.c_char_p),
        "ggml_backend_dev_description": ([p], ctypes.c_char_p),
        "ggml_backend_dev_type": ([p], ctypes.c_int),
        "ggml_backend_dev_backend_reg": ([p], p),
        "ggml_backend_dev_memory": ([p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)], None),
        "ggml_backend_reg_by_name": ([ctypes.c_char_p], p),
        "ggml_backend_reg_get_proc_address": ([p, ctypes.c_char_p], p),
        "ggml_backend_register": ([p], None),
        "ggml_backend_reg_dev_count": ([p], ctypes.c_size_t),
        "ggml_backend_reg_dev_get": ([p, ctypes.c_size_t], p),
    }
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
    return lib


def _device(lib: ctypes.CDLL, index: int) -> Device:
    dev = lib.ggml_backend_dev_get(index)
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    reg = lib.ggml_backend_dev_backend_reg(dev)
    return Device(
        index=index,
        name=lib.ggml_backend_dev_name(dev).decode(),
        description=lib.ggml_backend_dev_description(dev).decode(),
        kind=_DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "other"),
        backend=lib.ggml_backend_reg_name(reg).decode().lower(),
        memory_free=free.value,
        memory_total=total.value,
    )


@functools.cache
def build_info() -> BuildInfo:
    llama_cpp.llama_backend_init()
    lib = ggml()
    backends = tuple(
        lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)).decode().lower()
        for i in range(lib.ggml_backend_reg_count())
    )
    devices = tuple(_device(lib, i) for i in range(lib.ggml_backend_dev_count()))
    return BuildInfo(
        version=llama_cpp.__version__,
        library_path=str(llama_cpp.llama_cpp._base_path),
        backends=backends,
        devices=devices,
        gpu_offload=bool(llama_cpp.llama_supports_gpu_offload()),
        rpc=bool(llama_cpp.llama_supports_rpc()),
        system_info=llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
    )


def require_backend(backend: str, device: int) -> Device | None:
    """The device `--backend/--device` names, or a WorkerError naming what the build has."""
    info = build_info()
    if backend not in info.servable:
        raise WorkerError(
            f"backend {backend!r} is not in this llama.cpp build (it has: {', '.join(info.servable)}); "
            f"pick one of those or rebuild llama-cpp-python for it: llm-worker build-backend {backend}"
        )
    if backend == "cpu":
        return None
    devices = info.devices_of(backend)
    if not 0 <= device < len(devices):
        raise WorkerError(
            f"--device {device} does not exist for backend {backend!r} "
            f"(it has {len(devices)} device(s): {', '.join(d.name for d in devices) or 'none'})"
        )
    return devices[device]
