"""Which llama.cpp library the process loads, chosen per model before llama_cpp is first imported: our patched
batch-invariant build, under whose switch every CPU kernel sums a row in one order whatever the batch, or
llama-cpp-python's own (docs/cache-and-exactness.md, "Prefix cache")."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from worker.engine.config import EngineConfig
from worker.engine.exactness.kv_plan import config_attention
from worker.engine.exactness.tensor_table import weight_product_types

LIB_PATH_ENV = "LLAMA_CPP_LIB_PATH"  # read by llama_cpp/llama_cpp.py at import
# Read by llama_cpp/mtmd_cpp.py at import: libmtmd calls into libllama, so it comes from the same build (--mmproj).
MTMD_PATH_ENV = "MTMD_CPP_LIB"
SWITCH_ENV = "GGML_CPU_BATCH_INVARIANT"  # read by ggml_cpu_init (patches/llama.cpp)
# Where `make install` puts the patched build (scripts/build-llama-cpp's output, cached per flags and patches).
BATCH_INVARIANT_DIR = Path(sys.prefix) / "lib" / "llm-worker" / "batch-invariant"
# scripts/build-llama-cpp's record of a build (presets, patch set, flags), copied beside the libraries it made.
BUILD_RECORD = "llm-worker-build"
# What the fallback cannot hold to one order: llamafile's GEMM takes these weights from 2 rows, vec_dot one row.
TINYBLAS_TYPES = frozenset({"F32", "F16", "BF16"})


@dataclass(frozen=True)
class Library:
    build: str  # default (llama_cpp/lib) | batch-invariant (its switch on) | LLAMA_CPP_LIB_PATH (the user's)
    path: str  # the directory libllama is loaded from
    reason: str  # one line: why this one
    fallback: bool = False  # exact or off mode without the patched build: pinned kernels, and what they cannot hold


def build_origin(library_dir: str | Path) -> str:
    """Who compiled the libraries in this directory, in one line. scripts/build-llama-cpp leaves its record beside
    them (make install, the images, build-backend); llama-cpp-python's own compile (a plain pip install) leaves none."""
    record = Path(library_dir) / BUILD_RECORD
    if not record.is_file():
        return "llama-cpp-python's own compile (pip install), without our patches"
    fields = dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
    patches = f"our patches (set {fields['patches']})" if fields.get("patches") else "no patches"
    return f"scripts/build-llama-cpp, preset {fields.get('presets') or '?'}, {patches}"


def default_dir() -> Path:
    """llama-cpp-python's own lib/, found without importing the package (its __init__ loads the library)."""
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.submodule_search_locations, "llama-cpp-python is not installed"
    return Path(spec.submodule_search_locations[0]) / "lib"


def choose_library(model: Path, config: EngineConfig, patched: Path = BATCH_INVARIANT_DIR) -> Library:
    """The build whose kernels keep this model's rows apart, for this mode and backend. Exact and off modes on the
    cpu backend take the batch-invariant build for every weight type and LoRA adapter (patch 0004 holds an adapter's
    F16 or F32 tensors to one order as it does F16 weights). Where `make install` has not built it they fall back to
    llama-cpp-python's own, held to the kernels that ignore the batch unpatched (kv_plan.py's pinned attention,
    ggml_switches.py), which F16/BF16/F32 weights or adapter tensors and unfused attention cannot be. Fast mode loads
    llama_cpp/lib: make install's build of the same patched llama.cpp, switch off, or llama-cpp-python's own."""
    if user := os.environ.get(LIB_PATH_ENV):
        return Library("LLAMA_CPP_LIB_PATH", user, f"{LIB_PATH_ENV} is set")
    default = str(default_dir())
    if not config.rows_kept_apart:
        return Library("default", default, "rows may depend on their batch (fast mode), or not a cpu-only model")
    if batch_invariant_installed(patched) and (config.mmproj is None or has_mtmd(patched)):
        return Library("batch-invariant", str(patched), f"{SWITCH_ENV}=1: every row's arithmetic ignores its batch")
    missing = (f"the batch-invariant build is not installed at {patched} (make install builds it)"
               if not batch_invariant_installed(patched) else
               f"the batch-invariant build at {patched} has no libmtmd, which --mmproj needs (make install builds it)")
    lost = []
    if weights := sorted(set(weight_product_types(model)) & TINYBLAS_TYPES):
        lost.append(f"{'/'.join(weights)} weights")
    if lora_types := sorted({kind for lora in config.lora for kind in weight_product_types(lora.path)}
                            & TINYBLAS_TYPES):
        lost.append(f"{'/'.join(lora_types)} LoRA adapter tensors")
    if config_attention(config).flash_attn == "off":  # K·Q and V·softmax: llamafile's GEMM over the F16 cells
        lost.append("attention without flash attention")
    if lost:
        return Library("default", default, f"{missing}: {' and '.join(lost)} compute a row by its batch's size, so "
                                           "rows depend on their batch", fallback=True)
    return Library("default", default, f"{missing}: flash attention pinned to its per-row kernel (slower prefill)",
                   fallback=True)


def expects_batch_invariant(config: EngineConfig, patched: Path = BATCH_INVARIANT_DIR, *,
                            projector: bool = False) -> bool:
    """Will choose_library give this config the batch-invariant build (for flags checked before a model is known)?
    `projector`: one will load (--mmproj), though the config cannot name its file until it is fetched."""
    return (LIB_PATH_ENV not in os.environ and config.rows_kept_apart and batch_invariant_installed(patched)
            and (not (projector or config.mmproj) or has_mtmd(patched)))


def batch_invariant_installed(patched: Path = BATCH_INVARIANT_DIR) -> bool:
    return (patched / "libllama.so").exists()


def has_mtmd(build: Path) -> bool:
    return (build / "libmtmd.so").exists()


def load_library(library: Library) -> Library:
    """Point llama-cpp-python at the chosen library (and turn the patched one's switch on), and say which one the
    process has: the chosen one, or the one loaded already if llama_cpp was imported before the model was known (a
    conversion's llama_model_quantize in this process), as a process cannot load a second libllama.
    llama-cpp-python binds its functions when imported, from LLAMA_CPP_LIB_PATH, and ggml reads the switch when its
    CPU backend first initializes, which the import may do: both are set before it."""
    if "llama_cpp" not in sys.modules:
        if library.build != "default":
            os.environ[LIB_PATH_ENV] = library.path
        if library.build == "batch-invariant":
            os.environ[SWITCH_ENV] = "1"
        loaded = library
    elif (path := loaded_library()) == library.path:
        loaded = library
    else:
        loaded = Library(loaded_build(), path, f"llama.cpp was loaded before the model was known, where "
                                               f"{library.build} was chosen ({library.reason}): restart the worker "
                                               "to load it",
                         fallback=library.fallback or library.build == "batch-invariant")
    _pair_mtmd(loaded)
    return loaded


def _pair_mtmd(library: Library) -> None:
    """libmtmd from the build libllama comes from. llama_cpp/mtmd_cpp.py reads MTMD_CPP_LIB when the projector first
    imports it, which can be after llama_cpp itself was imported (the backend check at startup imports it under
    LLAMA_CPP_LIB_PATH): without this, a build of the user's would pair with llama-cpp-python's own libmtmd, or with
    none where the package has no lib/ (a GPU bundle)."""
    if library.build != "default" and has_mtmd(Path(library.path)) and "llama_cpp.mtmd_cpp" not in sys.modules:
        os.environ[MTMD_PATH_ENV] = library.path


def loaded_library() -> str:
    """The directory this process's libllama came from (llama_cpp imported)."""
    return str(sys.modules["llama_cpp"].llama_cpp._base_path)


def loaded_build() -> str:
    """default | batch-invariant | LLAMA_CPP_LIB_PATH: which build this process loaded (llama_cpp imported)."""
    return {str(default_dir()): "default", str(BATCH_INVARIANT_DIR): "batch-invariant"}.get(loaded_library(),
                                                                                           "LLAMA_CPP_LIB_PATH")
